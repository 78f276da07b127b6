package paging_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want int
		refused  bool
	}{
		{0, codes.DefaultPageLimit, false},
		{1, 1, false},
		{codes.MaxPageLimit, codes.MaxPageLimit, false},
		{codes.MaxPageLimit + 1, 0, true},
		{-1, 0, true},
	}
	for _, tt := range tests {
		got, err := paging.Limit(tt.in)
		var pe *paging.Error
		if tt.refused != errors.As(err, &pe) || got != tt.want {
			t.Errorf("Limit(%d) = %d, %v; want %d, refused %v", tt.in, got, err, tt.want, tt.refused)
		}
		if tt.refused && (pe.Field != "limit" || pe.Code() != codes.InvalidRequest) {
			t.Errorf("Limit(%d) refused as %q with %s", tt.in, pe.Field, pe.Code())
		}
	}
}

func TestCursor(t *testing.T) {
	t.Parallel()
	onlyB := func(e string) bool { return e[0] == 'b' }
	tests := []struct {
		name, cursor string
		valid        func(string) bool
		want         string
		refused      bool
	}{
		{"first page", "", onlyB, "", false},
		{"a cursor a page handed out", layout.EncodeCursor("b7"), nil, "b7", false},
		{"checked by valid", layout.EncodeCursor("b7"), onlyB, "b7", false},
		{"refused by valid", layout.EncodeCursor("a7"), onlyB, "", true},
		{"not a cursor", "%%%", nil, "", true},
	}
	for _, tt := range tests {
		got, err := paging.Cursor(tt.cursor, tt.valid)
		var pe *paging.Error
		if tt.refused != errors.As(err, &pe) || got != tt.want {
			t.Errorf("%s: Cursor = %q, %v; want %q, refused %v", tt.name, got, err, tt.want, tt.refused)
		}
		if tt.refused && (pe.Field != "cursor" || pe.Code() != codes.InvalidCursor) {
			t.Errorf("%s: refused as %q with %s", tt.name, pe.Field, pe.Code())
		}
	}
}

// Read merges its lists in entry order, skips what read skips, resumes
// after a cursor's entry and answers a short page, with a cursor, when the
// budget runs out first.
func TestRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	for _, k := range []string{"a/1", "b/2", "a/3", "b/4", "a/5"} {
		if _, err := s.Put(ctx, k, []byte(k), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	prefixes := []string{"a/", "b/"}
	read := func(skip string) func(context.Context, int, string) (string, bool, error) {
		return func(_ context.Context, list int, entry string) (string, bool, error) {
			return prefixes[list] + entry, entry != skip, nil
		}
	}
	tests := []struct {
		name          string
		after         string
		limit, budget int
		skip          string
		want          []string
		next          string // the entry the next cursor resumes after; "" for none
	}{
		{"first page", "", 3, 0, "", []string{"a/1", "b/2", "a/3"}, "3"},
		{"last page", "3", 3, 0, "", []string{"b/4", "a/5"}, ""},
		{"exactly the rest", "2", 3, 0, "", []string{"a/3", "b/4", "a/5"}, ""},
		{"a skipped entry", "", 3, 0, "2", []string{"a/1", "a/3", "b/4"}, "4"},
		{"budget before limit", "", 3, 2, "1", []string{"b/2"}, "2"},
	}
	for _, tt := range tests {
		items, next, err := paging.Read(ctx, s, prefixes, tt.after, tt.limit, tt.budget, read(tt.skip))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		wantNext := ""
		if tt.next != "" {
			wantNext = layout.EncodeCursor(tt.next)
		}
		if len(items) != len(tt.want) || next != wantNext {
			t.Errorf("%s: Read = %q, next %q; want %q, next %q", tt.name, items, next, tt.want, wantNext)
			continue
		}
		for i := range items {
			if items[i] != tt.want[i] {
				t.Errorf("%s: Read = %q, want %q", tt.name, items, tt.want)
				break
			}
		}
	}
}
