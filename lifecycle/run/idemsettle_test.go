package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// settleRig is two runners on a store that settles in 5 s, whose create
// of an idempotency record can be accepted over an existing one, and an
// agent that counts its executions.
type settleRig struct {
	g     *rig
	fs    *faultstore.Store
	a, b  *run.Runner
	execs *atomic.Int32
	req   lifecycle.SubmitRequest
}

func newSettleRig(t *testing.T, machine string) *settleRig {
	fs := faultstore.New(memStore(t))
	g := newRig(t, storage.New(fs))
	fs.SetSettle(5*time.Second, g.clock.Now)
	fs.Match(layout.IsIdempotencyKey)
	execs := &atomic.Int32{}
	agent := run.Agent{Slug: "once", Machine: machine, Steps: []run.Step{{Name: "charge", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
		execs.Add(1)
		return run.StepOutput{}, nil
	}}}}
	a, _ := g.runner("a", nil, agent)
	b, _ := g.runner("b", nil, agent)
	return &settleRig{g: g, fs: fs, a: a, b: b, execs: execs,
		req: lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:client:charge-1"}}
}

// hideMarkers makes the next listing of the key's run markers leave them
// out, as a store that settles may for a moment: a submit starting a
// generation then cannot see a rival's run, and the gate decides.
func (s *settleRig) hideMarkers() {
	markers := layout.IdempotencyRunsPrefix(s.req.IdempotencyKey)
	s.fs.Match(func(key string) bool { return layout.IsIdempotencyKey(key) || strings.HasPrefix(key, markers) })
	s.fs.ShortList(1)
}

func (s *settleRig) submit(t *testing.T, r *run.Runner) string {
	t.Helper()
	res, err := r.Submit(context.Background(), s.req)
	if err != nil {
		t.Fatal(err)
	}
	return res.RunID
}

// judge waits for both runs to end and checks the key executed once: the
// winner completed, the loser failed IDEMPOTENCY_DUPLICATE naming it, its
// marker quarantined, and the record names the winner.
func (s *settleRig) judge(t *testing.T, winner, loser string) {
	t.Helper()
	if st := s.g.wait(s.a, winner, time.Second, time.Minute); st.Status != "completed" && st.Status != "succeeded" {
		t.Fatalf("winner %s: %+v", winner, st)
	}
	st := s.g.wait(s.b, loser, time.Second, time.Minute)
	if (st.Status != "failed" && st.Status != "canceled") || st.Error == nil || !strings.HasPrefix(*st.Error, codes.IdempotencyDuplicate+": ") || !strings.Contains(*st.Error, winner) {
		t.Fatalf("loser %s: %s %v", loser, st.Status, st.Error)
	}
	if n := s.execs.Load(); n != 1 {
		t.Errorf("the key executed %d times, want once", n)
	}
	if s.fs.Faults().DoubleCreates == 0 {
		t.Error("no create was accepted over the record: the test provoked nothing")
	}
	marker, _ := layout.IdempotencyRunKey(s.req.IdempotencyKey, loser)
	until(t, "the loser's marker quarantined", func() bool {
		_, _, ok := records.FindQuarantined(context.Background(), s.g.store, marker)
		return ok
	})
	// The repair runs after the loser's end is visible; wait for it.
	until(t, "the record repaired to the winner", func() bool {
		rec, err := s.a.Idempotency(context.Background(), s.req.IdempotencyKey)
		return err == nil && rec.RunID == winner && rec.Status == idemrecord.Completed
	})
}

// TestSettleTwoFirstSubmitsExecuteOnce: two first submits of one key both
// "create" its record (the store accepts the second create over the
// first), and the second cannot list the first's run yet; each is
// answered its own run, and only the earliest executes. On the
// cancel-aware machine, whose queued runs cannot fail, the loser ends
// canceled.
func TestSettleTwoFirstSubmitsExecuteOnce(t *testing.T) {
	t.Parallel()
	for _, machine := range []string{lifecycle.MachineCanonical, lifecycle.MachineCancelable, lifecycle.MachineApproval} {
		t.Run(machine, func(t *testing.T) {
			t.Parallel()
			s := newSettleRig(t, machine)
			s.fs.AcceptCreateOver(1)
			first := s.submit(t, s.a)
			s.g.clock.Advance(time.Millisecond) // the second submit's generation starts later
			s.hideMarkers()
			second := s.submit(t, s.b)
			if first == second {
				t.Fatalf("both submits answered %s: the store accepted no second create", first)
			}
			s.judge(t, first, second)
		})
	}
}

// TestSettleSecondCreateIsAnsweredTheEarlierRun: a second first submit of
// a key whose record create lands over the first's (the cluster scenario
// answered such a submit its own run, which the gate then failed as a
// duplicate) lists the key's runs before creating its own, finds the
// earlier one, and is answered it: one run for the key, executed once,
// and the record names it.
func TestSettleSecondCreateIsAnsweredTheEarlierRun(t *testing.T) {
	t.Parallel()
	for _, late := range []time.Duration{time.Millisecond, time.Hour} {
		t.Run(late.String(), func(t *testing.T) {
			t.Parallel()
			s := newSettleRig(t, "")
			first := s.submit(t, s.a)
			if late == time.Hour {
				if st := s.g.wait(s.a, first, time.Second, time.Minute); st.Status != "completed" {
					t.Fatalf("first run: %+v", st)
				}
			}
			s.g.clock.Advance(late)
			s.fs.AcceptCreateOver(1)
			res, err := s.b.Submit(context.Background(), s.req)
			if err != nil || res.RunID != first || !res.Duplicate {
				t.Fatalf("second submit: %+v %v, want the earlier run %s as a duplicate", res, err, first)
			}
			if s.fs.Faults().DoubleCreates != 1 {
				t.Fatalf("%d creates accepted over the record, want 1: the test provoked nothing", s.fs.Faults().DoubleCreates)
			}
			if st := s.g.wait(s.a, first, time.Second, time.Minute); st.Status != "completed" || s.execs.Load() != 1 {
				t.Fatalf("run %+v, executed %d times", st, s.execs.Load())
			}
			var markers []string
			for key, err := range s.g.store.List(context.Background(), layout.IdempotencyRunsPrefix(s.req.IdempotencyKey)) {
				if err != nil {
					t.Fatal(err)
				}
				markers = append(markers, key)
			}
			if len(markers) != 1 || !strings.Contains(markers[0], first) {
				t.Errorf("markers %v, want only the earlier run's", markers)
			}
			rec, err := s.a.Idempotency(context.Background(), s.req.IdempotencyKey)
			if err != nil || rec.RunID != first || rec.Status != idemrecord.Completed {
				t.Errorf("record %+v %v, want completed naming %s", rec, err, first)
			}
		})
	}
}

// TestSettleLateRetryOverACompletedRecordIsNotExecuted: an hour after a
// key's run completed, a retry's create lands over the completed record
// and, not listing the first run yet, makes a run of its own; that run
// never executes.
func TestSettleLateRetryOverACompletedRecordIsNotExecuted(t *testing.T) {
	t.Parallel()
	s := newSettleRig(t, "")
	first := s.submit(t, s.a)
	if st := s.g.wait(s.a, first, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("first run: %+v", st)
	}
	s.g.clock.Advance(time.Hour)
	s.fs.AcceptCreateOver(1)
	s.hideMarkers()
	late := s.submit(t, s.b)
	if late == first {
		t.Fatal("the late retry was answered the first run: the store accepted no second create")
	}
	s.judge(t, first, late)
}

// TestSettleCareCostsNothingWhereTheStoreSettlesAtOnce: on a store that
// settles at once an idempotent submit writes no marker, and its run
// executes without reading any.
func TestSettleCareCostsNothingWhereTheStoreSettlesAtOnce(t *testing.T) {
	t.Parallel()
	g := newRig(t, memStore(t))
	agent := run.Agent{Slug: "plain", Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:client:plain"})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" {
		t.Fatalf("run %s", st.Status)
	}
	if g.store.SettleTime() != 0 {
		t.Fatal("the memstore settles")
	}
	for key, err := range g.store.List(context.Background(), layout.IdempotencyPrefix+"runs/") {
		t.Errorf("marker %s written (%v) on a store that settles at once", key, err)
	}
}

// TestSettleFalseNotFoundOfTheRecordIsNotAnAnswer: a duplicate whose read
// of the key's record answers a false not-found (after its create found
// the record there) reads again, and is answered the key's run.
func TestSettleFalseNotFoundOfTheRecordIsNotAnAnswer(t *testing.T) {
	t.Parallel()
	s := newSettleRig(t, "")
	first := s.submit(t, s.a)
	s.fs.FalseNotFound(1)
	res, err := s.b.Submit(context.Background(), s.req)
	if err != nil || res.RunID != first || !res.Duplicate {
		t.Fatalf("duplicate: %+v %v, want run %s", res, err, first)
	}
	if s.fs.Faults().FalseNotFounds != 1 {
		t.Fatalf("%d false not-founds provoked, want 1", s.fs.Faults().FalseNotFounds)
	}
	if st := s.g.wait(s.a, first, time.Second, time.Minute); st.Status != "completed" || s.execs.Load() != 1 {
		t.Fatalf("run %+v, executed %d times", st, s.execs.Load())
	}
}

// TestSettleDisturbedBurstExecutesOnce: 16 clients submit one key at once,
// through two runners, while the store is disturbed (every create of the
// record over an existing one is accepted, for Settle). Every answer names
// a run that exists and ends; the key executes once.
func TestSettleDisturbedBurstExecutesOnce(t *testing.T) {
	t.Parallel()
	s := newSettleRig(t, "")
	s.fs.Disturb()
	answers := make(chan string, 16)
	var wg sync.WaitGroup
	for i := range 16 {
		r := s.a
		if i%2 == 1 {
			r = s.b
		}
		wg.Go(func() {
			// A submit meeting an earlier run of its key that does not read
			// back yet is answered IDEMPOTENCY_IN_PROGRESS, and its client
			// retries, as clients are told to (docs/spec.md#idempotency).
			res, err := r.Submit(context.Background(), s.req)
			for try := 0; errors.Is(err, lifecycle.ErrIdempotencyInProgress) && try < 100; try++ {
				time.Sleep(10 * time.Millisecond)
				res, err = r.Submit(context.Background(), s.req)
			}
			if err != nil {
				t.Errorf("submit: %v", err)
				return
			}
			if _, err := r.Status(context.Background(), res.RunID); err != nil {
				t.Errorf("answered %s: %v", res.RunID, err)
			}
			answers <- res.RunID
		})
	}
	wg.Wait()
	close(answers)
	runs := map[string]bool{}
	for id := range answers {
		runs[id] = true
	}
	completed := 0
	for id := range runs {
		st := s.g.wait(s.a, id, time.Second, time.Minute)
		switch {
		case st.Status == "completed":
			completed++
		case st.Status != "failed" || st.Error == nil || !strings.HasPrefix(*st.Error, codes.IdempotencyDuplicate):
			t.Errorf("run %s: %s %v", id, st.Status, st.Error)
		}
	}
	t.Logf("%d runs answered, %d creates accepted over the record", len(runs), s.fs.Faults().DoubleCreates)
	if completed != 1 || s.execs.Load() != 1 {
		t.Errorf("%d runs completed, the key executed %d times; want 1 and 1", completed, s.execs.Load())
	}
}

// TestSettleWaitingRunIsReadOnceItMayGo: a keyed run waiting out the
// store's settle time before its first step is not read at every poll
// (on a cluster that made 98 reads a run); it is read again when its wait
// is over, and then runs.
func TestSettleWaitingRunIsReadOnceItMayGo(t *testing.T) {
	t.Parallel()
	fs := faultstore.New(memStore(t))
	g := newRig(t, nil)
	fs.SetSettle(30*time.Second, g.clock.Now)
	counting := &teststores.Counting{Store: fs}
	g = g.with(storage.New(counting))
	agent := run.Agent{Slug: "keyed", Steps: []run.Step{okStep("s")}}
	r, _ := g.runner("a", nil, agent)
	res, err := r.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:client:wait-1"})
	if err != nil {
		t.Fatal(err)
	}
	g.timers(1)
	// One poll first: the wake-up of the submit and the first poll may each
	// look at the new run once (the look that learns it must wait).
	g.clock.Advance(time.Second)
	<-g.clock.WaitForTimers(1)
	counting.Reset()
	for range 24 { // 24 more polls of a second inside the settle time
		g.clock.Advance(time.Second)
		<-g.clock.WaitForTimers(1)
	}
	if got := counting.Gets.Load(); got != 0 {
		t.Errorf("24 polls inside the settle time made %d reads, want none", got)
	}
	if st := g.wait(r, res.RunID, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("run %s", st.Status)
	}
}

// TestSettleTakeoverAnswersTheEarlierRun: a rival generation's record
// landed over the key's completed one and its submitter died before
// creating its run; a retry that takes the lapsed lease, once the run's
// absence is sure, finds the earlier run of the key and is answered it,
// creating none (it created the rival's run, for the gate to end, before).
func TestSettleTakeoverAnswersTheEarlierRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSettleRig(t, "")
	first := s.submit(t, s.a)
	if st := s.g.wait(s.a, first, time.Second, time.Minute); st.Status != "completed" {
		t.Fatalf("first run: %+v", st)
	}
	rec, err := s.a.Idempotency(ctx, s.req.IdempotencyKey)
	if err != nil {
		t.Fatal(err)
	}
	now := s.g.clock.Now()
	rival := "run_" + now.UTC().Format("2006-01-02_150405") + "_0123456789"
	rec.RunID, rec.CreatedAt, rec.UpdatedAt, rec.Status, rec.Response = rival, now, now, idemrecord.Processing, nil
	rec.LeaseOwner, rec.LeaseExpiresAt, rec.LockExpiresAt, rec.Attempts = "dead#1", &now, &now, 1
	marker := idemrecord.Marker{Key: rec.Key, RunID: rival, RequestHash: rec.RequestHash, CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
	markerKey, _ := layout.IdempotencyRunKey(rec.Key, rival)
	for key, v := range map[string]any{layout.IdempotencyKey(rec.Key): rec, markerKey: marker} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.g.store.Put(ctx, key, b, storage.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	var res lifecycle.SubmitResult
	for range 3 { // busy until the rival's absence is sure, a settle time after the first look
		if res, err = s.b.Submit(ctx, s.req); err == nil {
			break
		}
		s.g.clock.Advance(6 * time.Second)
	}
	if err != nil || res.RunID != first || !res.Duplicate {
		t.Fatalf("retry: %+v %v, want the earlier run %s as a duplicate", res, err, first)
	}
	if _, err := s.a.Status(ctx, rival); err == nil {
		t.Errorf("the rival generation's run %s was created", rival)
	}
	if rec, err := s.a.Idempotency(ctx, s.req.IdempotencyKey); err != nil || rec.RunID != first {
		t.Errorf("record %+v %v, want it naming %s", rec, err, first)
	}
}
