package client_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/runconveyor/conveyor/"

// belowEngine is every package of the module the client may depend on: the
// leaves, the storage contract and records (under lifecycle's wire types),
// the machines (the sentinels Error matches) and the stream's wire format.
// The engines (lifecycle/run and below it, jobqueue, lifecycle/nlm, inbox,
// artifact, internal/core), the store adapters and the server are not here.
var belowEngine = map[string]bool{
	"adapters/httpapi/client":        true,
	"adapters/httpapi/sse":           true,
	"adapters/httpapi/internal/wire": true,
	"lifecycle":                      true,
	"internal/authority":             true,
	"lifecycle/clock":                true,
	"internal/codes":                 true,
	"storage":                        true,
	"storage/driver":                 true,
	"internal/records":               true,
	"internal/jsonenc":               true, // a leaf: the records' encoders
	"internal/layout":                true,
	"internal/tracing":               true,
}

// TestNoEngine: a program that imports the client builds without the
// engine. It lists the client's dependencies with the go command (test
// files aside: the example may start a Worker) and fails on any package of
// the module outside belowEngine.
func TestNoEngine(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", module+"adapters/httpapi/client").Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	seen := 0
	for pkg := range strings.FieldsSeq(string(out)) {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue // the standard library and third-party leaves
		}
		seen++
		if !belowEngine[rel] {
			t.Errorf("the client depends on %s, which is not below the engine", rel)
		}
	}
	if seen == 0 {
		t.Fatal("go list named no package of the module: the test would pass whatever the client imports")
	}
}
