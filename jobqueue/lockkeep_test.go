package jobqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestAgentLockKeepsANewerReleasesFields: an agent lock carrying a member
// a newer release added keeps it, as every record kind does, across every
// write of the lock: a claim taking it, a stopping Worker releasing the
// lock its claim kept, and the sweep freeing a lapsed one. Its counter
// only grows.
func TestAgentLockKeepsANewerReleasesFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	q := newQueue(t, s, clk)
	enqueue(t, q, "job-1", "agent-a")
	enqueue(t, q, "job-2", "agent-a")
	const key, newer = "queue/agents/agent-a.json", `"lane_class":{"tier":"gold","n":[1,2]}`
	b, v, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b = append(append(append(b[:len(b)-1:len(b)-1], ','), newer...), '}')
	if _, err := s.Put(ctx, key, b, storage.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	var last struct {
		Version int64  `json:"version"`
		JobID   string `json:"job_id"`
	}
	writes := 0
	check := func(what string) {
		t.Helper()
		b, v2, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if v2 == v {
			t.Fatalf("%s: the lock was not written", what)
		}
		v = v2
		if !bytes.Contains(b, []byte(newer)) {
			t.Fatalf("%s: the lock dropped the newer release's member: %s", what, b)
		}
		prev := last.Version
		last.JobID = "" // absent from a free lock
		if err := json.Unmarshal(b, &last); err != nil || last.Version <= prev {
			t.Fatalf("%s: lock %s (%v): its counter went from %d to %d", what, b, err, prev, last.Version)
		}
		writes++
	}
	c := claim(t, q, "w1")
	if c == nil {
		t.Fatal("no claim")
	}
	check("a claim took it")
	if _, err := c.Run(ctx, okHandlers()); err != nil {
		t.Fatal(err)
	}
	q.ReleaseKeptForTest(ctx) // as a Worker does when it stops
	check("a stopping Worker released the lock its claim kept")
	if c = claim(t, q, "w1"); c == nil {
		t.Fatal("no claim")
	}
	check("a claim took it again")
	if _, err := c.Run(ctx, okHandlers()); err != nil {
		t.Fatal(err)
	}
	if last.JobID == "" {
		t.Fatalf("the kept lock names no job: the sweep below would not write it")
	}
	clk.Advance(2 * jobqueue.DefaultLeaseTTL) // the kept lock lapses
	if _, err := newQueue(t, s, clk).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	check("the sweep freed it")
	if last.JobID != "" {
		t.Fatalf("the sweep left the lock naming %s", last.JobID)
	}
}
