package run_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// pollCost counts the store round trips of a runner's polls over a store
// holding finished runs of its agent and 5 runs parked for an approval:
// the start-up poll, then 30 polls a second apart (ParkedPollInterval, so
// the parked runs are read once more). It returns both counts and the keys
// the polls listed.
func pollCost(t *testing.T, finished int) (startup, polls, listed int64) {
	g := newRig(t, memStore(t))
	agent := run.Agent{Slug: "hist", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), okStep("apply")}}
	a, stopA := g.runner("a", nil, agent)
	for range 5 {
		id := submit(t, a, agent.Slug)
		if st := g.wait(a, id, 0, 0); st.Status != "awaiting_approval" {
			t.Fatalf("run %s is %s", id, st.Status)
		}
	}
	done := submit(t, a, agent.Slug)
	if st := g.wait(a, done, 0, 0); st.Status != "awaiting_approval" {
		t.Fatalf("run %s is %s", done, st.Status)
	}
	if _, err := a.Approve(context.Background(), done, lifecycle.ActorGateway, run.Decision{}); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(a, done, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("run %s is %s", done, st.Status)
	}
	stopA()
	// History: copies of the completed run's status and index entry.
	ctx := context.Background()
	statusKey, _ := layout.RunStatusKey(agent.Slug, done)
	indexKey, _ := layout.RunIndexKey(done)
	status, _, err := g.store.Get(ctx, statusKey)
	if err != nil {
		t.Fatal(err)
	}
	index, _, err := g.store.Get(ctx, indexKey)
	if err != nil {
		t.Fatal(err)
	}
	for i := range finished {
		id := fmt.Sprintf("run_2026-02-14_080000_h%06d", i)
		for key, body := range map[string][]byte{strings.ReplaceAll(statusKey, done, id): status, strings.ReplaceAll(indexKey, done, id): index} {
			if _, err := g.store.Put(ctx, key, bytes.ReplaceAll(body, []byte(done), []byte(id)), storage.IfNotExists()); err != nil {
				t.Fatal(err)
			}
		}
	}
	counting := &teststores.Counting{Store: g.store} // Lists by the page, as S3 bills them
	g.with(storage.New(counting)).runner("b", nil, agent)
	// Idle, not "a timer is armed": a timer of another loop (or of the
	// stopped runner) can be armed before b's poll has run, and the count
	// then splits differently each time (seen under load: 23 vs 11).
	g.idle() // b's start-up poll is over
	startup = counting.PagedOps()
	counting.Reset()
	for range 30 {
		g.clock.Advance(time.Second)
		g.idle() // the poll that came due is done
	}
	return startup, counting.PagedOps(), counting.Listed.Load()
}

// TestPollCostFlatInHistory: a runner's polls read the index of runs not
// yet terminal (index/active/), never the run folders, so their store round
// trips are the same over 1,000 and 100,000 finished runs (issue 12 asks
// for at most 1.2x).
func TestPollCostFlatInHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 runs")
	}
	s0, p0, l0 := pollCost(t, 1000)
	s1, p1, l1 := pollCost(t, 100000)
	t.Logf("start-up poll %d vs %d round trips, 30 polls %d vs %d, keys listed %d vs %d", s0, s1, p0, p1, l0, l1)
	if float64(s1) > 1.2*float64(s0) || float64(p1) > 1.2*float64(p0) || l1 != l0 {
		t.Fatalf("polls cost more over 100,000 finished runs than over 1,000: start-up %d vs %d, 30 polls %d vs %d, keys listed %d vs %d",
			s1, s0, p1, p0, l1, l0)
	}
}
