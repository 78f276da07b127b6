//go:build unix

package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/sqlitestore"
)

// TestBellNotAFIFORefused: a bell left as a plain file (a copy that does
// not keep FIFOs) is refused with its name, not used as a bell that never
// rings and grows by a byte at every ring.
func TestBellNotAFIFORefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	if err := os.WriteFile(path+"-bell-lock", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: path})
	if err == nil {
		_ = s.Close()
		t.Fatal("a plain file as the bell was accepted")
	}
	if !strings.Contains(err.Error(), "bell-lock") {
		t.Fatalf("error %v does not name the bell", err)
	}
}
