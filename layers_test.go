package conveyor_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const module = "github.com/runconveyor/conveyor"

// rigLayer is row T of the table: test kits and rigs.
const rigLayer = 100

// programLayer is the layer of examples/; the root package, the
// composition root, is the layer below it.
const programLayer = 13

// maxSeams bounds the seams of docs/design.md: engines import the types,
// the machines, storage and internal/, not each other, but for a few calls
// the code makes.
const maxSeams = 3

// layers is the table of docs/design.md (its section layersSection): each
// package pattern (a
// module-relative path, "." for the root, "x/..." for x and below) with its
// layer, and the seams between packages of one layer.
type layers struct {
	patterns []layerPattern
	seams    map[[2]string]bool
}

type layerPattern struct {
	pattern string
	layer   int
}

var (
	rowRe  = regexp.MustCompile(`^\|\s*(\d+|T)\b[^|]*\|(.*)\|\s*$`)
	tickRe = regexp.MustCompile("`([^`]+)`")
	seamRe = regexp.MustCompile("^- `([^`]+)` → (.*?):")
)

// parseLayers reads the layers table and the seams from the text of
// docs/design.md's section layersSection.
func parseLayers(doc string) (*layers, error) {
	l := &layers{seams: map[[2]string]bool{}}
	for line := range strings.SplitSeq(doc, "\n") {
		if m := rowRe.FindStringSubmatch(line); m != nil {
			n := rigLayer
			if m[1] != "T" {
				n, _ = strconv.Atoi(m[1])
			}
			for _, p := range tickRe.FindAllStringSubmatch(m[2], -1) {
				l.patterns = append(l.patterns, layerPattern{p[1], n})
			}
		}
		if m := seamRe.FindStringSubmatch(line); m != nil {
			for _, to := range tickRe.FindAllStringSubmatch(m[2], -1) {
				l.seams[[2]string{m[1], to[1]}] = true
			}
		}
	}
	if len(l.patterns) == 0 {
		return nil, fmt.Errorf("no layers table")
	}
	return l, nil
}

// layerOf returns the layer of a module-relative package path; the longest
// matching pattern wins.
func (l *layers) layerOf(pkg string) (int, bool) {
	best, layer := -1, 0
	for _, p := range l.patterns {
		match := p.pattern == pkg
		if base, ok := strings.CutSuffix(p.pattern, "/..."); ok {
			match = pkg == base || strings.HasPrefix(pkg, base+"/")
		}
		if match && len(p.pattern) > best {
			best, layer = len(p.pattern), p.layer
		}
	}
	return layer, best >= 0
}

// check returns every import of graph (package → the module packages it
// imports, module-relative) that breaks the table.
func (l *layers) check(graph map[string][]string) []string {
	var bad []string
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		lp, ok := l.layerOf(p)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is not in the layers table of docs/design.md", p))
			continue
		}
		for _, q := range graph[p] {
			lq, ok := l.layerOf(q)
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s imports %s, which is not in the layers table", p, q))
			case lp == rigLayer:
				if lq == programLayer {
					bad = append(bad, fmt.Sprintf("%s (test kit) imports the program %s", p, q))
				}
			case lp == programLayer:
				if lq == programLayer {
					bad = append(bad, fmt.Sprintf("%s imports another program, %s", p, q))
				}
			case lq == rigLayer:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports the test rig %s", p, lp, q))
			case lq > lp:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d), a higher layer", p, lp, q, lq))
			case lq == lp && !l.seams[[2]string{p, q}]:
				bad = append(bad, fmt.Sprintf("%s imports %s on its own layer %d, which is no seam of docs/design.md", p, q, lp))
			}
		}
	}
	return bad
}

// importGraph lists the module's packages and the module packages each
// imports (tests excluded), by go list.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	graph := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p, _ := rel(f[0])
		graph[p] = []string{}
		for _, imp := range f[1:] {
			if q, ok := rel(imp); ok {
				graph[p] = append(graph[p], q)
			}
		}
	}
	return graph
}

// layersSection is the heading of docs/design.md under which the table and
// the seams are written. Only that section is parsed, so a table or a list
// elsewhere in the page cannot add a layer or a seam.
const layersSection = "## Layers and packages"

func readLayers(t *testing.T) *layers {
	t.Helper()
	l, err := parseLayers(strings.Join(section(t, "docs/design.md", layersSection), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLayers holds the tree to docs/design.md: no import runs up a
// layer, none runs across one outside a listed seam, no production package
// imports a test rig, every package has a layer; and the seams are few
// and real (each one an import the code has).
func TestLayers(t *testing.T) {
	t.Parallel()
	l := readLayers(t)
	graph := importGraph(t)
	for _, v := range l.check(graph) {
		t.Error(v)
	}
	for _, v := range l.checkSeams(graph) {
		t.Error(v)
	}
}

// checkSeams returns what is wrong with the seams themselves: more than
// maxSeams, or one the code no longer has (a seam written to fit code
// that has since gone).
func (l *layers) checkSeams(graph map[string][]string) []string {
	var bad []string
	if len(l.seams) > maxSeams {
		bad = append(bad, fmt.Sprintf("docs/design.md lists %d seams; at most %d", len(l.seams), maxSeams))
	}
	for s := range l.seams {
		if !slices.Contains(graph[s[0]], s[1]) {
			bad = append(bad, fmt.Sprintf("the seam %s → %s is no import of the code", s[0], s[1]))
		}
	}
	slices.Sort(bad)
	return bad
}

// TestLayersCheck is the test of TestLayers: on the real table, a made-up
// graph with each kind of bad import fails the check, and the good one
// passes.
func TestLayersCheck(t *testing.T) {
	t.Parallel()
	l := readLayers(t)
	tests := []struct {
		name  string
		graph map[string][]string
		bad   bool
	}{
		{"down", map[string][]string{"lifecycle/run": {"internal/fence", "internal/machine", "lifecycle", "storage"}}, false},
		{"types import nothing", map[string][]string{"lifecycle": {"internal/codes"}}, true},
		{"storage imports the types", map[string][]string{"storage": {"lifecycle", "storage/driver"}}, false},
		{"machines below the records", map[string][]string{"internal/machine": {"internal/records"}}, true},
		{"seam", map[string][]string{"jobqueue": {"artifact"}}, false},
		{"back edge", map[string][]string{"storage": {"lifecycle/run"}}, true},
		{"up from the core", map[string][]string{"internal/fence": {"jobqueue"}}, true},
		{"engine imports engine", map[string][]string{"lifecycle/nlm": {"jobqueue"}}, true},
		{"across without a seam", map[string][]string{"artifact": {"jobqueue"}}, true},
		{"rig in production", map[string][]string{"jobqueue": {"internal/testkit/faultstore"}}, true},
		{"rig in an example", map[string][]string{"examples/chaos": {"internal/testkit/miniotest"}}, false},
		{"unknown package", map[string][]string{"newpkg": {}}, true},
		{"program imports program", map[string][]string{"examples/worker": {"examples/chaos"}}, true},
		{"program imports the root", map[string][]string{"examples/worker": {".", "adapters/httpapi"}}, false},
		{"root imports engines", map[string][]string{".": {"lifecycle/run", "jobqueue", "internal/prommetrics"}}, false},
		{"root imports a program", map[string][]string{".": {"examples/worker"}}, true},
		{"engine imports the root", map[string][]string{"jobqueue": {"."}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := l.check(tt.graph); (len(got) > 0) != tt.bad {
				t.Errorf("check(%v) = %q, want bad=%v", tt.graph, got, tt.bad)
			}
		})
	}
}

// TestSeamsCheck is the test of checkSeams: a seam the graph lacks, and
// one too many, fail; the real table's seams in a graph that has them pass.
func TestSeamsCheck(t *testing.T) {
	t.Parallel()
	l := readLayers(t)
	graph := map[string][]string{}
	for s := range l.seams {
		graph[s[0]] = append(graph[s[0]], s[1])
	}
	if bad := l.checkSeams(graph); len(bad) > 0 {
		t.Errorf("the table's seams in a graph that has them: %q", bad)
	}
	if bad := l.checkSeams(map[string][]string{}); len(bad) != len(l.seams) {
		t.Errorf("no imports at all: %q, want every seam reported", bad)
	}
	more := &layers{patterns: l.patterns, seams: map[[2]string]bool{}}
	for i := range maxSeams + 1 {
		more.seams[[2]string{"a", fmt.Sprint(i)}] = true
	}
	if bad := more.checkSeams(nil); !slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, "at most") }) {
		t.Errorf("%d seams: %q, want too many reported", maxSeams+1, bad)
	}
}
