package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// storeCLI runs the conveyor command with args and returns its exit code
// and output.
func storeCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// records reads every record of s: key to value.
func records(t *testing.T, s *storage.Store) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	for k, err := range s.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := s.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		m[k] = v
	}
	return m
}

// seed writes n JSON records, one not JSON and one empty into s, and
// returns them.
func seed(t *testing.T, s *storage.Store, n int) map[string][]byte {
	t.Helper()
	want := map[string][]byte{
		"artifacts/j1/blob": {0xff, 0x00, 'x'},
		"inbox/empty.json":  {},
	}
	for i := range n {
		want[fmt.Sprintf("agents/a%d/runs/r%04d/status.json", i%3, i)] = fmt.Appendf(nil, `{"run_id":"r%04d","state":"completed"}`, i)
	}
	for k, v := range want {
		if _, err := s.Put(t.Context(), k, v, storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestCopyRoundTrip: a directory store copied into SQLite and back into
// another directory, and SQLite into memory, holds the same records byte
// for byte (more than a page of them); the count is printed; a second copy
// finds them all there; a record the destination holds otherwise stops it.
func TestCopyRoundTrip(t *testing.T) {
	dir := t.TempDir()
	from, sqlitePath, back := filepath.Join(dir, "files"), filepath.Join(dir, "db", "conveyor.db"), filepath.Join(dir, "back")
	src, err := filestore.New(from)
	if err != nil {
		t.Fatal(err)
	}
	want := seed(t, src, copyPage+20)
	_ = src.Close()

	for _, hop := range [][2]string{{"dir:" + from, "sqlite:" + sqlitePath}, {"sqlite:" + sqlitePath, "dir:" + back}} {
		code, out, errOut := storeCLI(t, "copy", "-from", hop[0], "-to", hop[1])
		if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("copied %d records from ", len(want))) || !strings.Contains(out, "versions are each store's own") {
			t.Fatalf("copy %s -> %s: exit %d, %q %q", hop[0], hop[1], code, out, errOut)
		}
	}
	code, out, _ := storeCLI(t, "copy", "-from", "dir:"+from, "-to", "sqlite:"+sqlitePath)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("copied 0 records from filestore %s to sqlite %s (%d more were there already", from, sqlitePath, len(want))) {
		t.Fatalf("copy again: exit %d, %q", code, out)
	}

	db, err := sqlitestore.New(t.Context(), sqlitestore.Config{Path: sqlitePath})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mem := memstore.New()
	if n, same, err := copyStore(t.Context(), db, mem, ""); err != nil || n != len(want) || same != 0 {
		t.Fatalf("sqlite -> memory: %d copied, %d same, %v", n, same, err)
	}
	backStore, err := filestore.New(back)
	if err != nil {
		t.Fatal(err)
	}
	defer backStore.Close()
	for name, s := range map[string]*storage.Store{"sqlite": db, "directory again": backStore, "memory": mem} {
		got := records(t, s)
		if len(got) != len(want) {
			t.Errorf("%s: %d records, want %d", name, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Errorf("%s: %s = %q, want %q", name, k, got[k], v)
			}
		}
	}

	// A different record at the destination stops the copy, named.
	k := "agents/a0/runs/r0000/status.json"
	if _, err := backStore.Put(t.Context(), k, []byte(`{"other":1}`), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := storeCLI(t, "copy", "-from", "sqlite:"+sqlitePath, "-to", "dir:"+back, "-prefix", "agents/a0/")
	if code != 1 || !strings.Contains(errOut, k+": the destination holds another record") {
		t.Errorf("copy onto a different record: exit %d, %q", code, errOut)
	}
	if n, _, err := copyStore(context.Background(), db, memstore.New(), "agents/a1/"); err != nil || n != (copyPage+20)/3 {
		t.Errorf("copy -prefix agents/a1/: %d copied, %v", n, err)
	}
}

// TestShow: a record prints as its JSON, indented; a prefix prints a JSON
// line per record with its key and version, a value that is not JSON as
// bytes; the same on a directory and on SQLite.
func TestShow(t *testing.T) {
	dir := t.TempDir()
	files, err := filestore.New(filepath.Join(dir, "files"))
	if err != nil {
		t.Fatal(err)
	}
	want := seed(t, files, 4)
	_ = files.Close()
	db := filepath.Join(dir, "conveyor.db")
	if code, _, errOut := storeCLI(t, "copy", "-from", "dir:"+filepath.Join(dir, "files"), "-to", "sqlite:"+db); code != 0 {
		t.Fatal(errOut)
	}
	for _, store := range []string{"dir:" + filepath.Join(dir, "files"), "sqlite:" + db} {
		code, out, errOut := storeCLI(t, "show", "-store", store, "agents/a1/runs/r0001/status.json")
		if code != 0 || out != "{\n  \"run_id\": \"r0001\",\n  \"state\": \"completed\"\n}\n" {
			t.Errorf("%s: show a key: exit %d, %q %q", store, code, out, errOut)
		}
		code, out, errOut = storeCLI(t, "show", "-store", store, "")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || len(lines) != len(want) {
			t.Fatalf("%s: show everything: exit %d, %d lines, %q", store, code, len(lines), errOut)
		}
		for _, l := range lines {
			var r record
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%s: %q: %v", store, l, err)
			}
			got := []byte(r.Value)
			if r.Bytes != nil {
				got = r.Bytes
			}
			if r.Version == "" || !bytes.Equal(got, want[r.Key]) && !(len(want[r.Key]) == 0 && len(got) == 0) {
				t.Errorf("%s: %q, want %s = %q", store, l, r.Key, want[r.Key])
			}
		}
		if code, out, _ := storeCLI(t, "show", "-store", store, "agents/a2/"); code != 0 || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: show agents/a2/: exit %d, %q", store, code, out)
		}
		if code, _, errOut := storeCLI(t, "show", "-store", store, "agents/none.json"); code != 1 || !strings.Contains(errOut, "not found") {
			t.Errorf("%s: show a missing key: exit %d, %q", store, code, errOut)
		}
	}
}

func TestStoreCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"copy", "-from", "mem:"},
		{"copy", "-from", "mem:", "-to", "mem:"},
		{"copy", "-from", "dir:x", "-to", "mem:", "extra"},
		{"show", "-store", "mem:"},
		{"show", "x"},
		{"reconcile"},
		{"reconcile", "-store", "mem:", "extra"},
	} {
		if code, _, errOut := storeCLI(t, args...); code != 2 || !strings.Contains(errOut, "usage: conveyor "+args[0]) {
			t.Errorf("%q: exit %d, %q", args, code, errOut)
		}
	}
	if code, _, errOut := storeCLI(t, "show", "-store", "pebble:x", "k"); code != 1 || !strings.Contains(errOut, "want dir:PATH") {
		t.Errorf("an unknown store: exit %d, %q", code, errOut)
	}
}

// TestReconcileCommand: a job whose lane entry the store lost is put back
// by `conveyor reconcile` on the store itself.
func TestReconcileCommand(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "conveyor.db")
	s, _, err := storeopen.Open(ctx, "sqlite:"+db, storeopen.S3{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := jobqueue.New(jobqueue.Config{Store: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "a1"}); err != nil {
		t.Fatal(err)
	}
	for k, err := range s.List(ctx, layout.LanesPrefix) {
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, k, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	code, out, errOut := storeCLI(t, "reconcile", "-store", "sqlite:"+db)
	if code != 0 || !strings.Contains(out, "1 jobs read, 0 rescued, 1 relaned") {
		t.Fatalf("reconcile: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = storeCLI(t, "reconcile", "-store", "sqlite:"+db)
	if code != 0 || !strings.Contains(out, "1 jobs read, 0 rescued, 0 relaned") {
		t.Fatalf("reconcile again: exit %d, %q", code, out)
	}
}
