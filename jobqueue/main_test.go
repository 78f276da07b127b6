package jobqueue_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/teststores"
	"github.com/runconveyor/conveyor/storage"
)

// env is the package's MinIO: one server and bucket (starting MinIO costs
// seconds), each test under its own key prefix.
var env teststores.Env

func TestMain(m *testing.M) { goleak.VerifyTestMain(env.Wrap(m)) }

type storeCase struct {
	name string
	new  func(testing.TB) storage.Store
}

var stores = []storeCase{
	{"memstore", func(testing.TB) storage.Store { return memstore.New() }},
	{"minio", env.S3},
}

// forEachStore runs f on memstore and on a real MinIO.
func forEachStore(t *testing.T, f func(t *testing.T, s storage.Store)) {
	t.Helper()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			f(t, sc.new(t))
		})
	}
}
