package conveyor_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
)

// citationRes match a citation of the documents the specification was first
// written in, which are not in the repository: "seed 003 §4", "the seed's
// table", "004 §3.1", "DESIGN.md §5". The repository's own words are
// docs/spec.md; code and docs link there instead. A random seed (-seed 1,
// rand.NewPCG(seed, ...)) and fuzz seeds match none of them.
var citationRes = []*regexp.Regexp{
	regexp.MustCompile(`DESIGN\.md|\bDESIGN §|shared/seeds`),
	regexp.MustCompile(`(?i)\bseeds?\s+(0\d\d|§|appendix)`),
	regexp.MustCompile(`(?i)\bseeds?['’]s?`),
	regexp.MustCompile(`(?i)\bthe seeds?\b`),
	regexp.MustCompile(`(?i)\bseed (types?|job types?|ids?|fields?|order|tables?|keys?|codes?|documents?|intervals?|examples?|format|says|has|names|schemes?|error code)\b`),
	regexp.MustCompile(`\b00[0-4]\s*(§|appendix|F\d|RunRecord|['’]s\b)`),
	regexp.MustCompile(`\bseeds? (00[0-4] )?and 00[0-4]\b`),
}

// repoFiles yields the text files of the repository a reader sees (Go,
// Markdown, the page's assets, rule files, scripts), relative paths with
// forward slashes, skipping hidden folders and test data.
func repoFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".js", ".html", ".css", ".yml", ".yaml", ".sh":
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestNoSourceCitations fails when a file of repoFiles cites the original
// specification documents instead of docs/ (docs/spec.md): a reader of this
// repository cannot follow such a citation. Only this file, which holds the
// patterns, is spared.
func TestNoSourceCitations(t *testing.T) {
	t.Parallel()
	for _, path := range repoFiles(t) {
		if path == "docs_test.go" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, re := range citationRes {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d cites %q; link docs/spec.md instead: %s", path, i+1, m, strings.TrimSpace(line))
					break
				}
			}
		}
	}
}

// anchors returns the heading anchors of a Markdown file as GitHub makes
// them: lower case, punctuation dropped, spaces to hyphens, "-1", "-2"...
// for repeats.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var s strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				s.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				s.WriteRune(r)
			}
		}
		a := s.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var (
	// docLinkRe is a link into docs/ from anywhere: docs/spec.md#job-lifecycle,
	// or spec.md#job-lifecycle from a page of docs/.
	docLinkRe = regexp.MustCompile(`(?:docs/)?\b([a-z][a-z0-9-]*\.md)#([A-Za-z0-9_-]+)`)
	// pageLinkRe is a link within a page: ](#limits).
	pageLinkRe = regexp.MustCompile(`\]\(#([A-Za-z0-9_-]+)\)`)
)

// TestDocLinks fails when a link to a section of a page of docs/ names a
// section the page does not have.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	pages := map[string]map[string]bool{}
	page := func(name string) map[string]bool {
		if a, ok := pages[name]; ok {
			return a
		}
		path := filepath.Join("docs", name)
		if _, err := os.Stat(path); err != nil {
			pages[name] = nil
			return nil
		}
		pages[name] = anchors(t, path)
		return pages[name]
	}
	for _, path := range repoFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range docLinkRe.FindAllStringSubmatch(line, -1) {
				if !strings.HasPrefix(m[0], "docs/") && !strings.HasPrefix(path, "docs/") {
					continue // another folder's page, e.g. examples/chaos/README.md
				}
				a := page(m[1])
				if a == nil {
					t.Errorf("%s:%d links %s, which docs/ does not have", path, i+1, m[0])
				} else if !a[m[2]] {
					t.Errorf("%s:%d links %s: docs/%s has no section #%s", path, i+1, m[0], m[1], m[2])
				}
			}
			if strings.HasPrefix(path, "docs/") {
				for _, m := range pageLinkRe.FindAllStringSubmatch(line, -1) {
					if !page(strings.TrimPrefix(path, "docs/"))[m[1]] {
						t.Errorf("%s:%d links #%s, which the page does not have", path, i+1, m[1])
					}
				}
			}
		}
	}
}

// section returns the lines of a Markdown file from the heading that is
// exactly heading to the next heading of the same or a higher level.
func section(t *testing.T, path, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	level := strings.Index(heading, " ")
	var out []string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if in {
			if l := strings.Index(line, " "); strings.HasPrefix(line, "#") && l > 0 && l <= level && strings.Trim(line[:l], "#") == "" {
				break
			}
			out = append(out, line)
		} else if line == heading {
			in = true
		}
	}
	if !in {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	return out
}

// tableRows returns the cells of a section's table rows, the header and
// the separator left out.
func tableRows(lines []string) [][]string {
	var rows [][]string
	header := true
	for _, line := range lines {
		if !strings.HasPrefix(line, "|") {
			header = true
			continue
		}
		if header {
			header = false // the header line; the separator follows
			continue
		}
		if strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return rows
}

// codeConsts reads internal/codes/codes.go and returns the string constants
// of its const blocks: the error codes of the API (the block of
// InvalidTransition) and the job error codes (the block of JobTimeout).
// Read from the source so that the test sees a code added to a block
// without anyone listing it again.
func codeConsts(t *testing.T) (api, job []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("internal", "codes", "codes.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		var names, values []string
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, n.Name)
				values = append(values, v)
			}
		}
		switch {
		case slices.Contains(names, "InvalidTransition"):
			api = values
		case slices.Contains(names, "JobTimeout"):
			job = values
		}
	}
	if len(api) == 0 || len(job) == 0 {
		t.Fatalf("internal/codes/codes.go: found %d API codes and %d job codes", len(api), len(job))
	}
	return api, job
}

var backticked = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")

// TestSpecErrorCodes fails when docs/spec.md's tables of error codes and
// the code table (internal/codes) disagree: a code missing on either side,
// or another HTTP status. The error table of docs/http-api.md is checked
// against the code table too.
func TestSpecErrorCodes(t *testing.T) {
	t.Parallel()
	api, job := codeConsts(t)

	doc := map[string]int{}
	for _, row := range tableRows(section(t, "docs/spec.md", "### Codes and HTTP statuses")) {
		m := backticked.FindStringSubmatch(row[0])
		status, err := strconv.Atoi(row[1])
		if m == nil || err != nil {
			t.Errorf("docs/spec.md, codes and HTTP statuses: malformed row %q", row)
			continue
		}
		if _, dup := doc[m[1]]; dup {
			t.Errorf("docs/spec.md lists %s twice", m[1])
		}
		doc[m[1]] = status
	}
	for _, c := range api {
		status, ok := doc[c]
		switch {
		case !ok:
			t.Errorf("docs/spec.md, codes and HTTP statuses: no row for %s (HTTP %d in internal/codes)", c, codes.HTTPStatus(c))
		case status != codes.HTTPStatus(c):
			t.Errorf("docs/spec.md gives %s HTTP %d; internal/codes gives %d", c, status, codes.HTTPStatus(c))
		}
		delete(doc, c)
	}
	for c := range doc {
		t.Errorf("docs/spec.md lists %s, which internal/codes does not have", c)
	}

	jobDoc := map[string]bool{}
	for _, row := range tableRows(section(t, "docs/spec.md", "### Job error codes")) {
		if m := backticked.FindStringSubmatch(row[0]); m != nil {
			jobDoc[m[1]] = true
		}
	}
	for _, c := range job {
		if !jobDoc[c] {
			t.Errorf("docs/spec.md, job error codes: no row for %s", c)
		}
		delete(jobDoc, c)
	}
	for c := range jobDoc {
		t.Errorf("docs/spec.md lists job error code %s, which internal/codes does not have", c)
	}

	for _, row := range tableRows(section(t, "docs/http-api.md", "## Errors")) {
		status, err := strconv.Atoi(row[0])
		if err != nil {
			t.Errorf("docs/http-api.md, errors: malformed row %q", row)
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(row[1], -1) {
			if !slices.Contains(api, m[1]) {
				t.Errorf("docs/http-api.md lists %s, which internal/codes does not have", m[1])
			} else if codes.HTTPStatus(m[1]) != status {
				t.Errorf("docs/http-api.md gives %s HTTP %d; internal/codes gives %d", m[1], status, codes.HTTPStatus(m[1]))
			}
		}
	}
}

// TestSpecAuthorityMatrix fails when docs/spec.md's authority matrix and
// package authority's disagree.
func TestSpecAuthorityMatrix(t *testing.T) {
	t.Parallel()
	lines := section(t, "docs/spec.md", "### Authority matrix")
	tables := map[authority.Resource][]string{}
	var cur authority.Resource
	for _, line := range lines {
		switch line {
		case "Jobs:":
			cur = authority.Jobs
		case "Artifacts:":
			cur = authority.Artifacts
		case "Memory Backend:":
			cur = authority.Memory
		}
		if cur != "" && strings.HasPrefix(line, "|") {
			tables[cur] = append(tables[cur], line)
		}
	}
	for _, r := range []authority.Resource{authority.Jobs, authority.Artifacts, authority.Memory} {
		var want []string
		want = append(want, "| actor |")
		for _, op := range authority.Operations(r) {
			want[0] += " " + string(op) + " |"
		}
		for _, row := range authority.Table(r) {
			line := "| `" + string(row.Actor) + "` |"
			for _, op := range authority.Operations(r) {
				line += " " + row.Cells[op].String() + " |"
			}
			want = append(want, line)
		}
		var got []string
		for _, line := range tables[r] {
			if !strings.HasPrefix(line, "| ---") {
				// "(amended)" marks a cell the project changed from the
				// platform's table; the paragraph below the table says why.
				got = append(got, strings.ReplaceAll(line, " (amended) |", " |"))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("docs/spec.md's %s matrix differs from package authority's:\n got:\n%s\nwant:\n%s", r, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// docCaps are the most lines a page of docs/ may have. A page that grows
// past its cap is split by topic or trimmed of history (CHANGELOG.md and
// git keep that); a cap is raised only with the reason written beside it.
var docCaps = []struct {
	path string
	max  int
}{
	{"docs/design.md", 1450},     // the current rules by topic: rule, why, rejected; +250 for graphs, compensation, tenants, proposals, the run document, inbox jobs and the idempotency index (issues 31, 32)
	{"docs/performance.md", 440}, // the current numbers and how to reproduce them; +40 for SQLite's cost a job (issue 29) beside filestore's, until filestore's sections are cut
}

// gonePages are pages folded into others; they must not come back.
var gonePages = []string{
	"docs/decisions.md",    // history: CHANGELOG.md; current rules: docs/design.md
	"docs/architecture.md", // the layers and the walks: docs/design.md
}

// TestDocSizes fails when a page of docs/ outgrows its cap or a page
// folded into another is back.
func TestDocSizes(t *testing.T) {
	t.Parallel()
	for _, c := range docCaps {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > c.max {
			t.Errorf("%s has %d lines, more than its cap of %d: trim it or split it by topic", c.path, n, c.max)
		}
	}
	for _, p := range gonePages {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists; it was folded into docs/design.md and CHANGELOG.md", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Error(err)
		}
	}
}
