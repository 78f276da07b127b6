package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite golden files and docs/machines.md from the tables")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runOut(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(args, &out); err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String()
}

// golden compares got with the file, or rewrites the file under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./examples/machines -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s is stale; run go test ./examples/machines -update (-file +tables):\n%s", path, diff)
	}
}

func TestGoldenDiagrams(t *testing.T) {
	for _, s := range specs() {
		golden(t, filepath.Join("testdata", s.Name+".mmd"), runOut(t, "-format", "mermaid", "-machine", s.Name))
		golden(t, filepath.Join("testdata", s.Name+".dot"), runOut(t, "-format", "dot", "-machine", s.Name))
	}
}

// TestMachinesDoc fails when docs/machines.md no longer matches the tables.
func TestMachinesDoc(t *testing.T) {
	golden(t, filepath.Join("..", "..", "docs", "machines.md"), runOut(t, "-format", "markdown"))
}

func TestJSONExport(t *testing.T) {
	t.Parallel()
	var doc struct {
		Machines []map[string]json.RawMessage `json:"machines"`
	}
	dec := json.NewDecoder(strings.NewReader(runOut(t)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range doc.Machines {
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		if len(keys) != 5 || m["name"] == nil || m["initial"] == nil || m["states"] == nil || m["terminal"] == nil || m["transitions"] == nil {
			t.Errorf("machine keys %v, want name, initial, states, terminal, transitions", keys)
		}
		var name string
		if err := json.Unmarshal(m["name"], &name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		var transitions []map[string]json.RawMessage
		if err := json.Unmarshal(m["transitions"], &transitions); err != nil {
			t.Fatal(err)
		}
		for _, tr := range transitions {
			if len(tr) != 4 || tr["from"] == nil || tr["to"] == nil || tr["event"] == nil || tr["actors"] == nil {
				t.Errorf("%s: transition keys %v, want from, to, event, actors", name, tr)
			}
		}
	}
	want := []string{"canonical-run", "cancelable-run", "approval-run", "run-step", "job", "general-job", "nlm-job", "inbox-entry"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("machine names (-want +got):\n%s", diff)
	}
}

func TestJSONOneMachine(t *testing.T) {
	t.Parallel()
	var doc struct {
		Machines []struct {
			Name        string   `json:"name"`
			Initial     string   `json:"initial"`
			States      []string `json:"states"`
			Terminal    []string `json:"terminal"`
			Transitions []struct {
				From, To, Event string
				Actors          []string
			} `json:"transitions"`
		} `json:"machines"`
	}
	if err := json.Unmarshal([]byte(runOut(t, "-machine", "inbox-entry", "-format", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Machines) != 1 {
		t.Fatalf("got %d machines", len(doc.Machines))
	}
	m := doc.Machines[0]
	if m.Name != "inbox-entry" || m.Initial != "pending" || len(m.States) != 4 || len(m.Terminal) != 3 || len(m.Transitions) != 3 {
		t.Errorf("inbox-entry exported as %+v", m)
	}
	if tr := m.Transitions[2]; tr.From != "pending" || tr.To != "expired" || tr.Event != "expire" || tr.Actors[0] != "system" {
		t.Errorf("expiry exported as %+v", tr)
	}
}

func TestDiagramsMarkExtensions(t *testing.T) {
	t.Parallel()
	mermaid := runOut(t, "-format", "mermaid", "-machine", "canonical-run")
	for _, want := range []string{"requested --> failed : fail (extension)", "queued --> failed : fail (extension)", "[*] --> requested", "completed --> [*]"} {
		if !strings.Contains(mermaid, want) {
			t.Errorf("mermaid lacks %q:\n%s", want, mermaid)
		}
	}
	if strings.Contains(mermaid, "running --> failed : fail (extension)") {
		t.Errorf("running → failed is in the spec's table, not an extension")
	}
	dot := runOut(t, "-format", "dot", "-machine", "job")
	for _, want := range []string{`"DEAD" -> "QUEUED" [label="requeue (operator requeue) (extension)", style=dashed]`, `"COMPLETE" [shape=doublecircle`} {
		if !strings.Contains(dot, want) {
			t.Errorf("dot lacks %q:\n%s", want, dot)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := [][]string{
		{"-machine", "nope"},
		{"-format", "svg"},
		{"-bogus"},
		{"extra"},
	}
	for _, args := range tests {
		err := run(args, &bytes.Buffer{})
		if !errors.Is(err, errUsage) {
			t.Errorf("run %v: %v, want a usage error", args, err)
		}
	}
}
