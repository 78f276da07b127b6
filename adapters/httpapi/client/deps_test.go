package client_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/runconveyor/conveyor/"

// imports is every package of the module or outside it the client may
// import itself: the types, the clock (a caller's fake clock times Wait),
// the code table and the store's not-found sentinel (the sentinels Error
// matches), the API's bodies and the stream's reader, and the trace API
// (the caller's trace goes with each request).
var imports = []string{
	module + "adapters/httpapi/internal/sse",
	module + "adapters/httpapi/internal/wire",
	module + "lifecycle",
	module + "lifecycle/clock",
	module + "internal/codes",
	"go.opentelemetry.io/otel/trace",
}

// belowEngine is every package of the module the client may depend on:
// what it imports, the types package and the clock's leaf. The engines
// (lifecycle/run, jobqueue, lifecycle/nlm, inbox, artifact), the machines,
// the records, the store and its adapters, the core and the server are not
// here.
var belowEngine = map[string]bool{
	"adapters/httpapi/client":        true,
	"adapters/httpapi/internal/sse":  true,
	"adapters/httpapi/internal/wire": true,
	"lifecycle":                      true,
	"lifecycle/clock":                true,
	"internal/activity":              true, // the clock's leaf
	"internal/codes":                 true,
}

// outside is every module outside the standard library the client may
// depend on: OpenTelemetry's trace API (and the hash its attributes use),
// to send the caller's trace header.
var outside = map[string]bool{
	"go.opentelemetry.io/otel":       true,
	"go.opentelemetry.io/otel/trace": true,
	"github.com/cespare/xxhash/v2":   true,
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	out, err := exec.Command(gobin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}

// TestNoEngine: a program that imports the client builds without the
// engine. It lists the client's imports and dependencies with the go
// command (test files aside: the example starts a Worker) and fails on an
// import outside imports, on any package of the module outside
// belowEngine, and on a module outside outside.
func TestNoEngine(t *testing.T) {
	t.Parallel()
	const pkg = module + "adapters/httpapi/client"
	for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, pkg) {
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") && !slices.Contains(imports, imp) {
			t.Errorf("the client imports %s, which is not in its list", imp)
		}
	}
	seen := 0
	for _, dep := range goList(t, "-deps", "-f", "{{.ImportPath}}", pkg) {
		rel, ok := strings.CutPrefix(dep, module)
		if !ok {
			continue // the standard library and outside modules, below
		}
		seen++
		if !belowEngine[rel] {
			t.Errorf("the client depends on %s, which is not below the engine", rel)
		}
	}
	if seen == 0 {
		t.Fatal("go list named no package of the module: the test would pass whatever the client imports")
	}
	mods := goList(t, "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", pkg)
	if !slices.Contains(mods, strings.TrimSuffix(module, "/")) {
		t.Fatal("go list named no module: the test would pass whatever the client depends on")
	}
	for _, m := range mods {
		if m != strings.TrimSuffix(module, "/") && !outside[m] {
			t.Errorf("the client depends on module %s", m)
		}
	}
}
