package inbox_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/testkit/teststores"
)

var env teststores.Env

func TestMain(m *testing.M) { goleak.VerifyTestMain(env.Wrap(m)) }
