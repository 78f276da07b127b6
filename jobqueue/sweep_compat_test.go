package jobqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestSweepLeaseOfEarlierWorkers: the sweep lease as Workers before the
// maintenance turn wrote it (owner, expires_at, cursor; no epoch) is read
// as it was: live, it holds the sweep off; run out, the sweep takes it,
// goes on from its cursor, and writes a record those Workers read (their
// fields as they were, the epoch beside them).
func TestSweepLeaseOfEarlierWorkers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		expiresIn time.Duration
		swept     bool
	}{
		{"live", 30 * time.Second, false},
		{"run out", -time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := memstore.New()
			clk := clock.NewFake(t0)
			q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.SweepBatch = 1 })
			for i := 1; i <= 2; i++ {
				enqueue(t, q, fmt.Sprintf("job-%d", i), fmt.Sprintf("agent-%d", i))
			}
			// The cursor stands after the first agent's lane entry.
			var first string
			for key, err := range s.List(ctx, layout.LanesPrefix) {
				if err != nil {
					t.Fatal(err)
				}
				first = key
				break
			}
			old := fmt.Sprintf(`{"version":3,"owner":"old-worker","expires_at":%q,"cursor":%q}`,
				t0.Add(tt.expiresIn).Format(time.RFC3339Nano), first)
			if _, err := s.Put(ctx, layout.SweepLeaseKey, []byte(old), storage.Condition{}); err != nil {
				t.Fatal(err)
			}
			r, swept, err := q.SweepIfDue(ctx, "new-worker", time.Minute)
			if err != nil || swept != tt.swept {
				t.Fatalf("SweepIfDue: swept %v, %v; want swept %v", swept, err, tt.swept)
			}
			b, _, err := s.Get(ctx, layout.SweepLeaseKey)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Version   int64     `json:"version"`
				Owner     string    `json:"owner"`
				Epoch     int64     `json:"epoch"`
				ExpiresAt time.Time `json:"expires_at"`
				Cursor    string    `json:"cursor"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if !tt.swept {
				if string(b) != old {
					t.Fatalf("a live lease was rewritten: %s", b)
				}
				return
			}
			// One entry after the cursor, the second agent's, and the end:
			// from the start, a batch of one would end at the first, there.
			if r.Entries != 1 || got.Owner != "new-worker" || got.Epoch != 1 || !got.ExpiresAt.Equal(t0.Add(time.Minute)) ||
				got.Version != 5 || got.Cursor != "" {
				t.Fatalf("swept %d entries; lease now %s", r.Entries, b)
			}
		})
	}
}
