package jobqueue_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestJunkRollupIsQuarantined: a rollup record that does not decode (a
// day's, an hour's chunk) no longer fails Counts and Activity for good:
// it is quarantined, the answer comes from the rest (the audit log the
// rollup was made of) and matches the list, and the next call finds the
// record made again or the hour rolled anew.
func TestJunkRollupIsQuarantined(t *testing.T) {
	t.Parallel()
	for _, junk := range []string{"day", "hour"} {
		t.Run(junk, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := storage.New(memstore.New())
			clk := clock.NewFake(t0)
			q := newQueue(t, s, clk, func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
			})
			op := jobqueue.Operator{Queue: q}
			clk.Advance(50 * time.Minute)
			for i := range 3 {
				if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: fmt.Sprintf("e-%d", i), JobType: emailType}); err != nil {
					t.Fatal(err)
				}
				if c := claim(t, q, "w"); c == nil {
					t.Fatal("nothing to claim")
				} else if _, err := c.Run(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			var key string
			switch junk {
			case "day":
				// Two days on, the day and its hours are rolled up.
				clk.Advance(48 * time.Hour)
				key = "stats/jobs/days/" + t0.Add(24*time.Hour).Format("20060102") + ".json"
			case "hour":
				// The hour of the jobs, closed, read by Activity.
				clk.Advance(40 * time.Minute)
				if _, err := op.Activity(ctx, lifecycle.ActorAdmin); err != nil {
					t.Fatal(err)
				}
				q = newQueue(t, s, clk) // another process: nothing cached
				op = jobqueue.Operator{Queue: q}
				key = "stats/jobs/hours/" + t0.Truncate(time.Hour).Format("20060102T15") + "/0000.json"
			}
			want := countsByCounts(t, q)
			if _, _, err := s.Get(ctx, key); err != nil {
				t.Fatalf("the rollup %s: %v", key, err)
			}
			putRaw(t, s, key, `{"net": "not a list"`)
			if junk == "hour" {
				a, err := op.Activity(ctx, lifecycle.ActorAdmin)
				if err != nil {
					t.Fatalf("Activity over a junk hour: %v", err)
				}
				done := 0
				for _, m := range a.Minutes {
					done += m.Completed
				}
				if done != 3 {
					t.Fatalf("Activity over a junk hour: %d completed; want the 3 from the audit log", done)
				}
				clk.Advance(48 * time.Hour) // the day is made of the hour rolled anew
			}
			got := countsByCounts(t, q)
			if !maps.Equal(got, want) {
				t.Fatalf("counts over a junk %s rollup:\n%s\nwant\n%s", junk, show(got), show(want))
			}
			if _, ok := quarantined(t, s)[key]; !ok {
				t.Fatalf("the junk %s rollup is not in quarantine: %v", junk, quarantined(t, s))
			}
			sameCounts(t, q, "a junk rollup quarantined")
		})
	}
}
