package run_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/storage"
)

// env is the package's MinIO: one server and bucket, each test under its
// own prefix.
var env teststores.Env

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	if os.Getenv(compKillEnv) != "" {
		os.Exit(compKillMain())
	}
	if os.Getenv(submitKillEnv) != "" {
		os.Exit(submitKillMain())
	}
	if os.Getenv(graphKillEnv) != "" {
		os.Exit(graphKillMain())
	}
	goleak.VerifyTestMain(env.Wrap(m))
}

// minioStore returns an s3store on the shared MinIO under a fresh prefix,
// skipping (or, in CI, failing) when there is no MinIO binary.
func minioStore(t testing.TB) *storage.Store { return env.S3(t) }

func memStore(testing.TB) *storage.Store { return memstore.New() }
