package storeopen_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// put writes key=val to s and closes it.
func put(t *testing.T, s *storage.Store, key, val string) {
	t.Helper()
	if _, err := s.Put(t.Context(), key, []byte(val), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// get reads key from s, closes it and returns the value.
func get(t *testing.T, s *storage.Store, key string) string {
	t.Helper()
	defer s.Close()
	b, _, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(b)
}

// TestEmbedded: the Worker's default is one SQLite file in its data
// directory; a directory that holds a directory store is refused for
// SQLite, named with how to keep it (-store files) or copy it, and served
// by -store files; a SQLite file beside other files is opened and says so
// (TestEmbeddedForeignFiles has the rest).
func TestEmbedded(t *testing.T) {
	ctx := t.Context()
	fresh := filepath.Join(t.TempDir(), "data")
	s, where, err := storeopen.Embedded(ctx, storeopen.SQLite, fresh)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "agents/a/x.json", "1")
	if where != "sqlite "+filepath.Join(fresh, storeopen.DBFile) {
		t.Errorf("where = %q", where)
	}
	if _, err := os.Stat(filepath.Join(fresh, storeopen.DBFile)); err != nil {
		t.Fatalf("the SQLite file: %v", err)
	}
	s, _, err = storeopen.Embedded(ctx, storeopen.SQLite, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "agents/a/x.json"); got != "1" {
		t.Fatalf("reopened: %q", got)
	}

	old := filepath.Join(t.TempDir(), "data")
	s, _, err = storeopen.Embedded(ctx, storeopen.Files, old)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "agents/a/y.json", "2")
	_, _, err = storeopen.Embedded(ctx, storeopen.SQLite, old)
	for _, want := range []string{old + " holds a directory store", "agents", "-store files", "copy -from dir:" + old} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SQLite on a directory store: %v, want it to say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(old, storeopen.DBFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a SQLite file was created beside the directory store: %v", err)
	}
	s, _, err = storeopen.Embedded(ctx, storeopen.Files, old)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "agents/a/y.json"); got != "2" {
		t.Fatalf("-store files: %q", got)
	}

	// Both: the SQLite file is used, and the description names the rest.
	if err := os.WriteFile(filepath.Join(fresh, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, where, err = storeopen.Embedded(ctx, storeopen.SQLite, fresh)
	if err != nil || !strings.Contains(where, "also holds stray, not the store's") {
		t.Fatalf("a SQLite file beside other files: %q %v", where, err)
	}
	_ = s.Close()

	if _, _, err := storeopen.Embedded(ctx, "pebble", fresh); err == nil || !strings.Contains(err.Error(), "want sqlite or files") {
		t.Errorf("-store pebble: %v", err)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, where string
	}{
		{"dir:" + filepath.Join(dir, "files"), "filestore " + filepath.Join(dir, "files")},
		{"sqlite:" + filepath.Join(dir, "db", "c.db"), "sqlite " + filepath.Join(dir, "db", "c.db")},
		{"mem:", "memory"},
	} {
		s, where, err := storeopen.Open(context.Background(), tt.name, storeopen.S3{})
		if err != nil || where != tt.where {
			t.Fatalf("Open(%q) = %q, %v; want %q", tt.name, where, err, tt.where)
		}
		put(t, s, "k", "v")
	}
	for _, bad := range []string{"", "dir:", "sqlite:", "s3://", "s3:bucket", "pebble:x", "./data"} {
		if _, _, err := storeopen.Open(context.Background(), bad, storeopen.S3{}); err == nil || !strings.Contains(err.Error(), "want dir:PATH") {
			t.Errorf("Open(%q) = %v, want a usage error", bad, err)
		}
	}
}

// TestEmbeddedForeignFiles: a data directory holding files that no store
// of the Worker's writes, and no store of the kind asked for, is refused
// at start, naming the directory and the files, with what to do; an empty
// directory, one holding only hidden files other tools leave, and one
// already holding the store (with strays beside it) keep working.
func TestEmbeddedForeignFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		kind  string
		files []string // "x/" makes a folder
		store string   // a store of this kind made first
		want  string   // "" wants it opened
	}{
		{name: "sqlite, unrelated files", kind: storeopen.SQLite, files: []string{"notes.txt", "photo.jpg", "a.pdf", "b.pdf", "src/"},
			want: "holds files that are not a Conveyor store (a.pdf, b.pdf, notes.txt, ...): the Worker keeps its SQLite file"},
		{name: "files, unrelated files", kind: storeopen.Files, files: []string{"notes.txt"},
			want: "holds files that are not a Conveyor store (notes.txt): the Worker keeps its directory store"},
		{name: "sqlite, empty", kind: storeopen.SQLite},
		{name: "files, empty", kind: storeopen.Files},
		{name: "sqlite, hidden files only", kind: storeopen.SQLite, files: []string{".DS_Store", ".gitkeep"}},
		{name: "sqlite, ours with a stray", kind: storeopen.SQLite, store: storeopen.SQLite, files: []string{"notes.txt"}},
		{name: "files, ours with a stray", kind: storeopen.Files, store: storeopen.Files, files: []string{"notes.txt"}},
		{name: "sqlite on a directory store with a stray", kind: storeopen.SQLite, store: storeopen.Files, files: []string{"notes.txt"},
			want: "holds a directory store (filestore: agents, notes.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			if tt.store != "" {
				s, _, err := storeopen.Embedded(t.Context(), tt.store, dir)
				if err != nil {
					t.Fatal(err)
				}
				put(t, s, "agents/a/x.json", "1")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.files {
				var err error
				if d, ok := strings.CutSuffix(f, "/"); ok {
					err = os.Mkdir(filepath.Join(dir, d), 0o755)
				} else {
					err = os.WriteFile(filepath.Join(dir, f), []byte("mine"), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadDir(dir)
			s, _, err := storeopen.Embedded(t.Context(), tt.kind, dir)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Embedded = %v, want it opened", err)
				}
				put(t, s, "agents/b/y.json", "2")
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatalf("Embedded opened it, want %q", tt.want)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, dir+" holds") || !strings.Contains(msg, tt.want) {
				t.Fatalf("Embedded = %v, want it to say %q", err, tt.want)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("refused, yet wrote into %s: %d entries, were %d", dir, len(after), len(before))
			}
		})
	}
}

// TestEmbeddedOnAFile: -data naming a file says so, for either store.
func TestEmbeddedOnAFile(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(f, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{storeopen.SQLite, storeopen.Files} {
		s, _, err := storeopen.Embedded(t.Context(), kind, f)
		if err == nil {
			_ = s.Close()
		}
		if want := f + " is a file, not a directory"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s on a file: %v, want it to say %q", kind, err, want)
		}
	}
}
