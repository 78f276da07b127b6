package conveyor_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// quickstartFile is the quickstart program; the README shows it whole and
// docs/quickstart.md records its length beside River's and asynq's.
const quickstartFile = "jobqueue/example_quickstart_test.go"

// countRowRe is a row of docs/quickstart.md's table: a program and its
// non-blank lines.
var countRowRe = regexp.MustCompile(`(?m)^\| (Conveyor|River|asynq) \| (\d+) \|`)

// TestQuickstart fails when the README's quickstart block is not the
// example file byte for byte, or the program has grown past the count
// docs/quickstart.md records for it, or that count is above River's or
// asynq's (issue 30: at most their length).
func TestQuickstart(t *testing.T) {
	t.Parallel()
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, f := range checkQuickstart(read("README.md"), read(quickstartFile), read("docs/quickstart.md")) {
		t.Error(f)
	}
}

// TestQuickstartChecker shows checkQuickstart failing on each fault.
func TestQuickstartChecker(t *testing.T) {
	t.Parallel()
	prog := "package p\n\nfunc Example_quickstart() {}\n"
	show := func(p string) string { return "# R\n\n```go\n" + p + "```\n" }
	doc := "| Conveyor | 2 | x |\n| River | 79 | y |\n| asynq | 150 | z |\n"
	tests := []struct {
		name, readme, prog, doc, want string
	}{
		{"in order", show(prog), prog, doc, ""},
		{"README differs", show(strings.Replace(prog, "{}", "{ }", 1)), prog, doc, "differs"},
		{"README lacks it", "# R\n", prog, doc, "no Go block"},
		{"grown past its count", show(prog + "var x = 1\n"), prog + "var x = 1\n", doc, "3 non-blank lines"},
		{"count above River's", show(prog), prog, strings.Replace(doc, "| River | 79", "| River | 1", 1), "above River's"},
		{"a count missing", show(prog), prog, "| Conveyor | 2 | x |\n", "no count for River"},
	}
	for _, tt := range tests {
		got := strings.Join(checkQuickstart(tt.readme, tt.prog, tt.doc), "; ")
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// checkQuickstart lists what is wrong with the README's quickstart block
// (readme), the program (prog) and the counts (doc).
func checkQuickstart(readme, prog, doc string) []string {
	var fails []string
	block, ok := goBlockWith(readme, "func Example_quickstart()")
	switch {
	case !ok:
		fails = append(fails, "README.md has no Go block with func Example_quickstart(): show "+quickstartFile+" in its Jobs section")
	case block != prog:
		fails = append(fails, "README.md's quickstart block differs from "+quickstartFile+": paste the file whole")
	}
	counts := map[string]int{}
	for _, m := range countRowRe.FindAllStringSubmatch(doc, -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	for _, name := range []string{"Conveyor", "River", "asynq"} {
		if _, ok := counts[name]; !ok {
			return append(fails, "docs/quickstart.md has no count for "+name)
		}
	}
	if n := nonBlank(prog); n > counts["Conveyor"] {
		fails = append(fails, fmt.Sprintf("%s has %d non-blank lines, past the %d docs/quickstart.md records: cut it, or record the new count", quickstartFile, n, counts["Conveyor"]))
	}
	for _, other := range []string{"River", "asynq"} {
		if counts["Conveyor"] > counts[other] {
			fails = append(fails, fmt.Sprintf("the quickstart's %d lines are above %s's %d", counts["Conveyor"], other, counts[other]))
		}
	}
	return fails
}

// goBlockWith is the first ```go block of md that holds marker.
func goBlockWith(md, marker string) (string, bool) {
	for rest := md; ; {
		i := strings.Index(rest, "```go\n")
		if i < 0 {
			return "", false
		}
		rest = rest[i+len("```go\n"):]
		j := strings.Index(rest, "\n```")
		if j < 0 {
			return "", false
		}
		if block := rest[:j+1]; strings.Contains(block, marker) {
			return block, true
		}
		rest = rest[j+1:]
	}
}

// nonBlank counts the lines of s with more than white space.
func nonBlank(s string) int {
	n := 0
	for line := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}
