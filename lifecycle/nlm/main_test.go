package nlm_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/testkit/teststores"
)

// env is the package's MinIO: one server and bucket, each test under its
// own key prefix.
var env teststores.Env

func TestMain(m *testing.M) { goleak.VerifyTestMain(env.Wrap(m)) }
