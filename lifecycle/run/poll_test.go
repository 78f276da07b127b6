package run_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// TestPollLeavesParkedRunsAlone: a runner watching runs parked by another
// reads each once per ParkedPollInterval, not at every poll, and still
// picks up, within that interval, a run resumed by a runner that is not
// running its loop.
func TestPollLeavesParkedRunsAlone(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	agent := run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval,
		Steps: []run.Step{awaitStep("plan", &run.Await{Approval: "merge"}), okStep("apply")}}
	a, stopA := g.runner("a", nil, agent)
	var ids []string
	for range 5 {
		id := submit(t, a, agent.Slug)
		if st := g.wait(a, id, 0, 0); st.Status != "awaiting_approval" {
			t.Fatalf("run %s is %s", id, st.Status)
		}
		ids = append(ids, id)
	}
	stopA()

	counting := &teststores.Counting{Store: g.store}
	b, _ := g.with(storage.New(counting)).runner("b", nil, agent)
	g.timers(1) // b's start-up poll is over: its next poll is armed
	// A status and, once per runner, the audit event of its last write
	// (a run at rest has no writer coming to repair a missing one).
	if got := counting.Gets.Load(); got != 10 {
		t.Fatalf("the start-up poll made %d reads, want the 5 parked runs' statuses and audit events", got)
	}
	counting.Reset()
	poll := func(n int) {
		for range n {
			g.clock.Advance(time.Second)
			<-g.clock.WaitForTimers(1) // the next poll is armed: this one is done
		}
	}
	poll(29)
	if got, lists := counting.Gets.Load(), counting.Lists.Load(); got != 0 || lists != 29 {
		t.Fatalf("29 polls read %d statuses in %d lists, want 0 reads in 29 lists", got, lists)
	}
	poll(1) // 30 s: ParkedPollInterval
	if got := counting.Gets.Load(); got != 5 {
		t.Fatalf("after ParkedPollInterval the poll read %d statuses, want 5", got)
	}

	// A runner that only serves control calls approves: b finds the run
	// within ParkedPollInterval and finishes it.
	c, err := run.NewRunner(run.Config{Store: g.store, Owner: "c", Clock: g.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, agent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Approve(context.Background(), ids[0], lifecycle.ActorGateway, run.Decision{}); err != nil {
		t.Fatal(err)
	}
	if st := g.wait(b, ids[0], time.Second, 31*time.Second); st.Status != "completed" {
		t.Fatalf("approved run ended %s", st.Status)
	}
}

// TestPollLeavesLeasedRunsAlone: a run another runner executes is read once
// and then not until its lease would lapse; when it does lapse the watching
// runner takes the run over as before.
func TestPollLeavesLeasedRunsAlone(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	b := newBlocker()
	step := b.step("work")
	step.Idempotent = true // so the takeover resumes it
	agent := run.Agent{Slug: "long", Steps: []run.Step{step}}
	a, stopA := g.runner("a", nil, agent)
	id := submit(t, a, agent.Slug)
	<-b.started
	stopA() // a's lease stays until it lapses
	close(b.release)

	counting := &teststores.Counting{Store: g.store}
	w, _ := g.with(storage.New(counting)).runner("w", nil, agent)
	g.timers(1) // w's start-up poll is over: its next poll is armed
	if got := counting.Gets.Load(); got != 1 {
		t.Fatalf("the start-up poll read %d statuses, want 1", got)
	}
	counting.Reset()
	for range 29 {
		g.clock.Advance(time.Second)
		<-g.clock.WaitForTimers(1)
	}
	if got := counting.Gets.Load(); got != 0 {
		t.Fatalf("29 polls read the leased run %d times, want 0", got)
	}
	if st := g.wait(w, id, 10*time.Second, 6*time.Minute); st.ResumeCount != 1 || st.Status != "completed" {
		t.Fatalf("after the lease lapsed: %+v (%s)", st, deref(st.Error))
	}
}
