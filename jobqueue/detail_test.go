package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// failingAt are handlers whose context step fails with err.
func failingAt(err error) jobqueue.Handlers {
	h := okHandlers()
	h.AssembleContext = func(context.Context, lifecycle.Job) (json.RawMessage, error) { return nil, err }
	return h
}

// runOnce claims the next job and runs it with h.
func runOnce(t *testing.T, q *jobqueue.Queue, h jobqueue.Handlers) lifecycle.Job {
	t.Helper()
	c := claim(t, q, "w1")
	if c == nil {
		t.Fatal("no claim")
	}
	j, err := c.Run(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestHistoryAttempts: a job that fails twice, is buried, requeued and
// completes shows every move from the audit log and the record, and each
// attempt with its own error and duration, counted again from 1 after
// the requeue.
func TestHistoryAttempts(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.MaxAttempts = 2 })
		enqueue(t, q, "job-1", "agent-a")
		if j := runOnce(t, q, failingAt(errors.New("first failure"))); j.Status != lifecycle.JobRetryBackoff {
			t.Fatalf("after attempt 1: %s", j.Status)
		}
		clk.Advance(time.Minute)
		if j := runOnce(t, q, failingAt(errors.New("second failure"))); j.Status != lifecycle.JobRetryBackoff {
			t.Fatalf("after attempt 2: %s", j.Status)
		}
		clk.Advance(time.Minute)
		if c := claim(t, q, "w1"); c != nil { // the wait over, the claim buries it
			t.Fatalf("claimed %+v", c.Job())
		}
		if j := get(t, q, "job-1"); j.Status != lifecycle.JobDead {
			t.Fatalf("after the wait: %s", j.Status)
		}
		if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, "job-1"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if j := runOnce(t, q, okHandlers()); j.Status != lifecycle.JobComplete {
			t.Fatalf("after the requeue: %s", j.Status)
		}
		h, err := (jobqueue.Operator{Queue: q}).History(ctx, lifecycle.ActorAdmin, "job-1")
		if err != nil {
			t.Fatal(err)
		}
		if h.Partial || h.Job.Status != lifecycle.JobComplete || !strings.Contains(string(h.Result), `"title":"Brief"`) {
			t.Fatalf("history of %s, partial %v, result %s", h.Job.Status, h.Partial, h.Result)
		}
		checkPath(t, h, "[PENDING QUEUED CONTEXT_ASSEMBLY RETRY_BACKOFF QUEUED CONTEXT_ASSEMBLY RETRY_BACKOFF FAILED DEAD QUEUED CONTEXT_ASSEMBLY NOTEBOOKLM_CALL ARTIFACT_WRITE COMPLETE]")
		wantAttempts := []struct {
			n       int
			outcome lifecycle.JobState
			err     string
		}{{1, lifecycle.JobRetryBackoff, "first failure"}, {2, lifecycle.JobRetryBackoff, "second failure"}, {1, lifecycle.JobComplete, ""}}
		if len(h.Attempts) != len(wantAttempts) {
			t.Fatalf("%d attempts: %+v", len(h.Attempts), h.Attempts)
		}
		for i, w := range wantAttempts {
			a := h.Attempts[i]
			if a.Attempt != w.n || a.Outcome != w.outcome || a.EndedAt == nil || a.DurationMS == nil {
				t.Fatalf("attempt %d: %+v", i, a)
			}
			if w.err == "" && a.Error != "" || w.err != "" && (a.ErrorCode != codes.JobHandlerError || !strings.Contains(a.Error, w.err)) {
				t.Fatalf("attempt %d error %s %q, want %q", i, a.ErrorCode, a.Error, w.err)
			}
		}
		if _, err := (jobqueue.Operator{Queue: q}).History(ctx, lifecycle.ActorAdmin, "job-none"); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("history of a missing job: %v", err)
		}
	})
}

// checkPath checks the states a history's moves went to, in order.
func checkPath(t *testing.T, h lifecycle.JobHistory, want string) {
	t.Helper()
	var path []string
	for _, m := range h.Moves {
		path = append(path, string(m.To))
	}
	if got := fmt.Sprint(path); got != want {
		t.Fatalf("moves %s\nwant  %s", got, want)
	}
}

// TestRestingRecordKeepsNoAuditedTrail: where the store commits several
// keys at once, a job that comes to rest (RETRY_BACKOFF, COMPLETE) is
// stored without its trail and audit_artifact, its moves being in the
// audit object of the same commit; where it does not, the record keeps
// them until its next write. Either way the history shows every move. A
// DEAD record keeps its trail on every store (retention may delete its
// audit days first).
func TestRestingRecordKeepsNoAuditedTrail(t *testing.T) {
	stores := map[string]func(testing.TB) *storage.Store{"memstore": func(testing.TB) *storage.Store { return memstore.New() },
		"filestore": fileStore, "sqlite": teststores.SQLite}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := open(t)
			clk := clock.NewFake(t0)
			q := newQueue(t, s, clk)
			enqueue(t, q, "job-1", "agent-a")
			raw := func() string {
				b, _, err := s.Get(ctx, "jobs/job-1.json")
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			check := func(at lifecycle.JobState) {
				t.Helper()
				rec := raw()
				kept := strings.Contains(rec, `"trail"`) || strings.Contains(rec, `"audit_artifact"`)
				if kept == s.CanCommit() {
					t.Fatalf("%s on %s (commits %v): trail or audit_artifact kept %v: %s", at, name, s.CanCommit(), kept, rec)
				}
			}
			if j := runOnce(t, q, failingAt(errors.New("first failure"))); j.Status != lifecycle.JobRetryBackoff {
				t.Fatalf("after attempt 1: %s", j.Status)
			}
			check(lifecycle.JobRetryBackoff)
			clk.Advance(time.Minute)
			if j := runOnce(t, q, okHandlers()); j.Status != lifecycle.JobComplete {
				t.Fatalf("after attempt 2: %s", j.Status)
			}
			check(lifecycle.JobComplete)
			h, err := (jobqueue.Operator{Queue: q}).History(ctx, lifecycle.ActorAdmin, "job-1")
			if err != nil {
				t.Fatal(err)
			}
			checkPath(t, h, "[PENDING QUEUED CONTEXT_ASSEMBLY RETRY_BACKOFF QUEUED CONTEXT_ASSEMBLY NOTEBOOKLM_CALL ARTIFACT_WRITE COMPLETE]")
			enqueue(t, q, "job-2", "agent-b")
			if j := runOnce(t, q, failingAt(jobqueue.Permanent(errors.New("bad input")))); j.Status != lifecycle.JobDead {
				t.Fatalf("job-2: %s", j.Status)
			}
			if b, _, err := s.Get(ctx, "jobs/job-2.json"); err != nil || !strings.Contains(string(b), `"trail"`) {
				t.Fatalf("DEAD record on %s: %s, %v: want its trail kept", name, b, err)
			}
		})
	}
}

// TestRequeueMatching: a bulk requeue moves the DEAD jobs of the filter,
// at most its limit a call, passes over jobs in other states, and refuses
// an actor the machine does not give the move, or a limit past MaxBulk,
// before writing anything.
func TestRequeueMatching(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.MaxAttempts = 1 })
		for i := range 5 {
			enqueue(t, q, fmt.Sprintf("job-%d", i), fmt.Sprintf("agent-%d", i))
		}
		dead := map[string]bool{}
		// (their attempt's outcome is FAILED: the write that failed it
		// went on to FAILED, checked below)
		for range 3 { // three die, two stay QUEUED
			j := runOnce(t, q, failingAt(jobqueue.Permanent(errors.New("bad"))))
			if j.Status != lifecycle.JobDead {
				t.Fatalf("%s: %s", j.JobID, j.Status)
			}
			dead[j.JobID] = true
		}
		refusals := []struct {
			name  string
			actor lifecycle.Actor
			jq    jobqueue.JobQuery
			code  string
		}{
			{"orchestration", lifecycle.ActorOrchestration, jobqueue.JobQuery{Status: lifecycle.JobDead}, codes.Forbidden},
			{"frontend", lifecycle.ActorFrontend, jobqueue.JobQuery{}, codes.Forbidden},
			{"limit past MaxBulk", lifecycle.ActorAdmin, jobqueue.JobQuery{Limit: jobqueue.MaxBulk + 1}, codes.InvalidRequest},
		}
		for _, r := range refusals {
			if _, err := (jobqueue.Operator{Queue: q}).RequeueMatching(ctx, r.actor, r.jq); lifecycle.ErrorCode(err) != r.code {
				t.Fatalf("%s: %v, want %s", r.name, err, r.code)
			}
		}
		// Every state, two a page: the QUEUED jobs are passed over.
		var done []string
		jq := jobqueue.JobQuery{Limit: 2}
		for pages := 0; ; pages++ {
			res, err := (jobqueue.Operator{Queue: q}).RequeueMatching(ctx, lifecycle.ActorAdmin, jq)
			if err != nil {
				t.Fatal(err)
			}
			if res.Count != len(res.JobIDs) || len(res.Failed) != 0 || res.Count > 2 {
				t.Fatalf("page %d: %+v", pages, res)
			}
			done = append(done, res.JobIDs...)
			if res.Next == "" {
				break
			}
			jq.Cursor = res.Next
		}
		if len(done) != len(dead) {
			t.Fatalf("requeued %v, want the dead %v", done, dead)
		}
		for id := range dead {
			h, err := (jobqueue.Operator{Queue: q}).History(ctx, lifecycle.ActorAdmin, id)
			if err != nil || len(h.Attempts) != 1 || h.Attempts[0].Outcome != lifecycle.JobFailed || h.Attempts[0].ErrorCode != codes.JobPermanent {
				t.Fatalf("history of %s: %+v, %v", id, h.Attempts, err)
			}
		}
		for _, id := range done {
			if !dead[id] {
				t.Fatalf("requeued %s, not dead", id)
			}
			if j := get(t, q, id); j.Status != lifecycle.JobQueued || j.Attempt != 0 {
				t.Fatalf("%s: %s attempt %d", id, j.Status, j.Attempt)
			}
		}
		res, err := (jobqueue.Operator{Queue: q}).RequeueMatching(ctx, lifecycle.ActorAdmin, jobqueue.JobQuery{Status: lifecycle.JobDead})
		if err != nil || res.Count != 0 || res.Next != "" {
			t.Fatalf("again: %+v, %v", res, err)
		}
	})
}

// TestLanes: each lane with its depth, and the lane whose job a worker
// holds marked running with the job's id.
func TestLanes(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk)
		enqueue(t, q, "job-a1", "agent-a")
		enqueue(t, q, "job-a2", "agent-a")
		enqueue(t, q, "job-b1", "agent-b")
		clk.Advance(time.Second)
		c := claim(t, q, "w1")
		if c == nil {
			t.Fatal("no claim")
		}
		running := c.Job()
		lanes, err := (jobqueue.Operator{Queue: q}).Lanes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]lifecycle.QueueLane{}
		for _, l := range lanes {
			got[l.Agent] = l
		}
		busy, other := "agent-a", "agent-b"
		if running.AgentSlug == "agent-b" {
			busy, other = other, busy
		}
		if l := got[busy]; !l.Running || l.JobID != running.JobID {
			t.Fatalf("busy lane %+v, running %s", l, running.JobID)
		}
		if l := got[other]; l.Running || l.Ready != 1 || l.OldestReadyMS != 1000 {
			t.Fatalf("idle lane %+v", l)
		}
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
		lanes, err = (jobqueue.Operator{Queue: q}).Lanes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lanes {
			if l.Running {
				t.Fatalf("a lane runs after the job ended: %+v", l)
			}
		}
	})
}

// BenchmarkJobHistory: a job's history when the audit log holds the objects
// of n other jobs in the job's window (all within seconds: the worst
// case, every key listed is in the window), on memstore and SQLite. It
// reports the keys listed per call: the cost grows with the log's keys in
// the window (keys only), not with its objects read.
func BenchmarkJobHistory(b *testing.B) {
	for _, sc := range []struct {
		name string
		new  func(testing.TB) *storage.Store
	}{{"memstore", func(testing.TB) *storage.Store { return memstore.New() }}, {"sqlite", teststores.SQLite}} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/others=%d", sc.name, n), func(b *testing.B) {
				ctx := context.Background()
				s := sc.new(b)
				clk := clock.NewFake(t0)
				q := newQueue(b, s, clk)
				jobs := make([]jobqueue.NewJob, 0, 500)
				for i := range n {
					jobs = append(jobs, jobqueue.NewJob{JobID: fmt.Sprintf("job-%06d", i), JobType: lifecycle.JobBrief, AgentSlug: fmt.Sprintf("a-%d", i%100)})
					if len(jobs) == cap(jobs) || i == n-1 {
						if _, err := q.EnqueueMany(ctx, lifecycle.ActorGateway, jobs); err != nil {
							b.Fatal(err)
						}
						jobs = jobs[:0]
					}
				}
				// Every job's enqueue segment is written at its first rest;
				// bury them all at once with a permanent failure each.
				for done := 0; done < n; {
					c, err := q.Claim(ctx, "w1")
					if err != nil {
						b.Fatal(err)
					}
					if c == nil { // the agents' locks are due a look a moment later
						clk.Advance(time.Millisecond)
						continue
					}
					done++
					if _, err := c.Run(ctx, failingAt(jobqueue.Permanent(errors.New("x")))); err != nil {
						b.Fatal(err)
					}
				}
				keys := countKeys(b, s, "audit/")
				b.ResetTimer()
				for b.Loop() {
					h, err := (jobqueue.Operator{Queue: q}).History(ctx, lifecycle.ActorAdmin, "job-000000")
					if err != nil || len(h.Attempts) != 1 {
						b.Fatalf("%+v, %v", h.Attempts, err)
					}
				}
				b.ReportMetric(float64(keys), "audit-keys")
			})
		}
	}
}
