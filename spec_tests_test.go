package conveyor_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// citedTestRe matches a test function a document names in backticks:
// `TestRunPageStates`, `ExampleClient_Submit`, `TestX/subtest` (the
// subtest is left out: its name is built at run time).
var citedTestRe = regexp.MustCompile("`((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)")

// definedTestRe matches the declaration of a test function.
var definedTestRe = regexp.MustCompile(`(?m)^func ((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)

// definedTests returns the test functions declared in the module's test
// files, in every package.
func definedTests(t *testing.T) map[string]bool {
	t.Helper()
	defined := map[string]bool{}
	for _, path := range repoFiles(t) {
		if !strings.HasSuffix(path, "_test.go") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range definedTestRe.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
	}
	return defined
}

// missingTests returns the test functions a document's text names that
// defined does not hold, sorted, each once.
func missingTests(text string, defined map[string]bool) []string {
	var missing []string
	for _, m := range citedTestRe.FindAllStringSubmatch(text, -1) {
		if !defined[m[1]] && !slices.Contains(missing, m[1]) {
			missing = append(missing, m[1])
		}
	}
	slices.Sort(missing)
	return missing
}

// TestDocsCiteExistingTests fails when a page of docs/ (docs/spec.md says
// which test holds each requirement) names a test function that no test
// file of the module declares: a renamed or deleted test leaves the
// requirement unheld while the page still claims it.
func TestDocsCiteExistingTests(t *testing.T) {
	t.Parallel()
	defined := definedTests(t)
	if !defined["TestDocsCiteExistingTests"] {
		t.Fatal("the test functions were not read: this test itself is missing from them")
	}

	// The checker, shown to fail: a made-up name is reported, a real
	// one (with a subtest) is not.
	fake := "held by `TestNoSuchFunctionAnywhere` and `TestDocsCiteExistingTests/sub`"
	if got := missingTests(fake, defined); !slices.Equal(got, []string{"TestNoSuchFunctionAnywhere"}) {
		t.Errorf("missingTests(%q) = %q, want [TestNoSuchFunctionAnywhere]", fake, got)
	}

	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pages, filepath.FromSlash("docs/spec.md")) {
		t.Fatalf("docs/spec.md not among %q", pages)
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range missingTests(string(b), defined) {
			t.Errorf("%s names %s, which no test file declares: rename the reference or say what holds the requirement now", filepath.ToSlash(page), name)
		}
	}
}

// routeLitRe matches a route of the HTTP API's table in the source of
// adapters/httpapi: route{method: "GET", path: "/runs/{runId}/status", ...}.
var routeLitRe = regexp.MustCompile(`(?:route)?\{method: *"([A-Z]+)", *path: *"([^"]+)"`)

// docRouteRe matches a row of docs/http-api.md's route table: its method
// and its path, query left out.
var docRouteRe = regexp.MustCompile("^\\| ([A-Z]+) \\| `([^`?]+)")

// wildcardRe matches a path's wildcard, whose name may differ between the
// page and the code.
var wildcardRe = regexp.MustCompile(`\{[^}]*\}`)

// TestHTTPAPIRoutes fails when docs/http-api.md's route table and the
// Worker's route table disagree: a route documented that the Worker does
// not serve, or one served that the page does not list. The webhooks,
// mounted apart under /webhooks/, are left out.
func TestHTTPAPIRoutes(t *testing.T) {
	t.Parallel()
	code := map[string]bool{}
	files, err := filepath.Glob("adapters/httpapi/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routeLitRe.FindAllStringSubmatch(string(b), -1) {
			code[m[1]+" "+wildcardRe.ReplaceAllString(m[2], "{}")] = true
		}
	}
	if !code["GET /runs/{}/status"] {
		t.Fatalf("the route table was not read from adapters/httpapi: %d routes", len(code))
	}

	doc := map[string]bool{}
	for _, line := range section(t, "docs/http-api.md", "## Routes") {
		m := docRouteRe.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(m[2], "/webhooks/") {
			continue
		}
		r := m[1] + " " + wildcardRe.ReplaceAllString(m[2], "{}")
		if doc[r] {
			t.Errorf("docs/http-api.md lists %s twice", r)
		}
		doc[r] = true
	}
	for r := range doc {
		if !code[r] {
			t.Errorf("docs/http-api.md lists %s, which adapters/httpapi does not route", r)
		}
	}
	for r := range code {
		if !doc[r] {
			t.Errorf("adapters/httpapi routes %s, which docs/http-api.md does not list", r)
		}
	}
}
