package evidence_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

func TestAbsenceConfirmedOnlyAfterSettle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		settle time.Duration
		reads  []time.Duration // offsets of not-found reads; -1 s means "found"
		want   []bool
	}{
		{"settles at once", 0, []time.Duration{0}, []bool{true}},
		{"one read is not evidence", 10 * time.Second, []time.Duration{0}, []bool{false}},
		{"too close", 10 * time.Second, []time.Duration{0, 9 * time.Second}, []bool{false, false}},
		{"settle apart", 10 * time.Second, []time.Duration{0, 5 * time.Second, 10 * time.Second}, []bool{false, false, true}},
		{"found in between starts over", 10 * time.Second, []time.Duration{0, -time.Second, 10 * time.Second, 19 * time.Second, 20 * time.Second}, []bool{false, false, false, false, true}},
		// A poll and a submit asking about one key both act on it: one
		// consuming the evidence made the other wait a settle time more,
		// over and over (a key answered 409 for a minute on a cluster).
		{"confirmed holds for every caller", 10 * time.Second, []time.Duration{0, 10 * time.Second, 11 * time.Second, 19 * time.Second}, []bool{false, true, true, true}},
		{"old evidence starts over", 10 * time.Second, []time.Duration{0, 10 * time.Second, 20 * time.Second, 29 * time.Second, 30 * time.Second}, []bool{false, true, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &evidence.Absence{Settle: tt.settle}
			for i, off := range tt.reads {
				if off < 0 {
					a.Found("k")
					continue
				}
				if got := a.Confirmed("k", t0.Add(off)); got != tt.want[i] {
					t.Fatalf("read %d at +%v: Confirmed = %v, want %v", i, off, got, tt.want[i])
				}
			}
		})
	}
}

func TestAbsenceForgetsKeysNobodyAsksAbout(t *testing.T) {
	t.Parallel()
	a := &evidence.Absence{Settle: time.Second}
	for i := range 100 {
		a.Confirmed(fmt.Sprint("old", i), t0)
	}
	a.Confirmed("new", t0.Add(time.Minute))
	if n := a.Suspected(); n != 1 {
		t.Fatalf("Suspected = %d after 4×Settle, want 1 (the new key)", n)
	}
}

type settling struct {
	driver.Store
	d time.Duration
}

func (s settling) Settle() time.Duration { return s.d }

type wrapping struct{ driver.Store }

func (w wrapping) Unwrap() driver.Store { return w.Store }

func TestSettleTimeFoundThroughWrappers(t *testing.T) {
	t.Parallel()
	mem := memstore.New()
	_ = context.Background()
	if d := mem.SettleTime(); d != 0 {
		t.Fatalf("memstore settles in %v, want 0", d)
	}
	s := wrapping{wrapping{settling{mem, 7 * time.Second}}}
	if d := storage.New(s).SettleTime(); d != 7*time.Second {
		t.Fatalf("SettleTime through two wrappers = %v, want 7s", d)
	}
	if d := storage.New(wrapping{mem}).SettleTime(); d != 0 {
		t.Fatalf("SettleTime of a wrapper over memstore = %v, want 0", d)
	}
}
