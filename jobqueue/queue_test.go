package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/jobaudit"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var t0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

const briefContent = `{"title":"Brief","body":"Short text","entity_map":{"violin":"Violin"},"word_count":2}`

func newQueue(t testing.TB, s *storage.Store, c clock.Clock, mod ...func(*jobqueue.Config)) *jobqueue.Queue {
	t.Helper()
	cfg := jobqueue.Config{Store: s, Clock: c, Node: "test", Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mod {
		m(&cfg)
	}
	q, err := jobqueue.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func okHandlers() jobqueue.Handlers {
	return jobqueue.Handlers{
		AssembleContext: func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			return json.RawMessage(`{"snapshot":true}`), nil
		},
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(briefContent), Tags: []string{"t"}}, nil
		},
	}
}

func spec(id, agent string) jobqueue.NewJob {
	return jobqueue.NewJob{JobID: id, RunID: "run_2026-02-24_abc123", JobType: lifecycle.JobBrief, AgentSlug: agent}
}

func enqueue(t testing.TB, q *jobqueue.Queue, id, agent string) lifecycle.Job {
	t.Helper()
	j, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, spec(id, agent))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func get(t testing.TB, q *jobqueue.Queue, id string) lifecycle.Job {
	t.Helper()
	j, err := q.Get(context.Background(), lifecycle.ActorAdmin, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func claim(t testing.TB, q *jobqueue.Queue, worker string) *jobqueue.Claim {
	t.Helper()
	c, err := q.Claim(context.Background(), worker)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// replay checks the audit log of the day of t0 and returns the final states.
func replay(t testing.TB, s *storage.Store, last time.Time) map[string]lifecycle.JobState {
	t.Helper()
	states, err := jobaudit.Replay(context.Background(), s, t0, last)
	if err != nil {
		t.Fatal(err)
	}
	return states
}

func countKeys(t testing.TB, s *storage.Store, prefix string) int {
	t.Helper()
	n := 0
	for _, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func TestHappyPath(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk)
		j := enqueue(t, q, "job-1", "architect-guardian")
		if j.Status != lifecycle.JobQueued || j.Attempt != 0 || j.MaxAttempts != 3 || j.QueuedAt == nil {
			t.Fatalf("enqueued %+v", j)
		}
		c := claim(t, q, "w1")
		if c == nil {
			t.Fatal("no claim")
		}
		if got := c.Job(); got.Status != lifecycle.JobContextAssembly || got.Attempt != 1 || got.Lease == nil || got.Lease.Owner != "w1" {
			t.Fatalf("claimed %+v", got)
		}
		done, err := c.Run(ctx, okHandlers())
		if err != nil {
			t.Fatal(err)
		}
		if done.Status != lifecycle.JobComplete || done.ArtifactID != artifact.IDForJob("job-1") || done.Lease != nil {
			t.Fatalf("finished %+v", done)
		}
		a, err := q.Artifacts().Get(ctx, lifecycle.ActorOrchestration, lifecycle.DefaultProject, done.ArtifactID)
		if err != nil || !a.Finalized || a.JobID != "job-1" || a.Type != artifact.Brief || a.Version != 1 {
			t.Fatalf("artifact %+v, %v", a, err)
		}
		if c := claim(t, q, "w2"); c != nil {
			t.Fatalf("claimed %v from an empty queue", c.Job())
		}
		if n := countKeys(t, s, layout.LanesPrefix); n != 0 {
			t.Fatalf("%d lane entries left", n)
		}
		states := replay(t, s, t0)
		if states["job-1"] != lifecycle.JobComplete {
			t.Fatalf("replayed %v", states)
		}
		// Listing jobs/ yields only jobs (issue 10 G): the lanes, the agent
		// lock and the sweep lease live under queue/.
		enqueue(t, q, "job-2", "architect-guardian")
		if _, _, err := q.SweepIfDue(ctx, "w1", time.Minute); err != nil {
			t.Fatal(err)
		}
		for key, err := range s.List(ctx, layout.JobsPrefix) {
			if _, ok := layout.JobIDFromKey(key); err != nil || !ok {
				t.Fatalf("listing jobs/ yields %q (%v)", key, err)
			}
		}
		if countKeys(t, s, layout.QueuePrefix) != 3 { // a lane entry, the lock, the sweep lease
			t.Fatalf("queue/ holds %d keys, want 3", countKeys(t, s, layout.QueuePrefix))
		}
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*jobqueue.Config){
		"no store":         func(c *jobqueue.Config) { c.Store = nil },
		"project":          func(c *jobqueue.Config) { c.Project = "../x" },
		"max attempts":     func(c *jobqueue.Config) { c.MaxAttempts = -1 },
		"negative backoff": func(c *jobqueue.Config) { c.Backoff = []time.Duration{time.Second, -time.Second} },
		"lease":            func(c *jobqueue.Config) { c.LeaseTTL = time.Millisecond },
		"step timeout":     func(c *jobqueue.Config) { c.StepTimeout = -time.Second },
		"sweep batch":      func(c *jobqueue.Config) { c.SweepBatch = -1 },
	} {
		cfg := jobqueue.Config{Store: stores[0].new(t)}
		mod(&cfg)
		if _, err := jobqueue.New(cfg); !errors.Is(err, jobqueue.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := jobqueue.New(jobqueue.Config{Store: stores[0].new(t)}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestEnqueueRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		actor lifecycle.Actor
		mod   func(*jobqueue.NewJob)
		want  error
	}{
		{"path id", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.JobID = "../x" }, lifecycle.ErrInvalidJob},
		// A job needs no run id (issue 21), but one it has must be an id.
		{"bad run id", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.RunID = "run 1" }, lifecycle.ErrInvalidJob},
		{"reserved agent", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.AgentSlug = jobqueue.TypeLane(lifecycle.JobBrief) }, lifecycle.ErrInvalidJob},
		{"agent slash", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.AgentSlug = "a/b" }, lifecycle.ErrInvalidJob},
		{"job type", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.JobType = "SUMMARY" }, lifecycle.ErrInvalidJob},
		{"max attempts", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.MaxAttempts = -1 }, lifecycle.ErrInvalidJob},
		{"payload", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.Payload = json.RawMessage("{") }, lifecycle.ErrInvalidJob},
		{"callback", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.Callback = "ftp://x/y" }, lifecycle.ErrInvalidJob},
		{"project", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.ProjectID = ".." }, lifecycle.ErrInvalidJob},
		{"entity ref", lifecycle.ActorGateway, func(n *jobqueue.NewJob) { n.Context.EntityRefs = []string{""} }, lifecycle.ErrInvalidJob},
		{"nlm-backend", lifecycle.ActorNLMBackend, nil, authority.ErrForbidden},
		{"mastra", lifecycle.ActorMastra, nil, authority.ErrForbidden},
		{"admin", lifecycle.ActorAdmin, nil, authority.ErrForbidden},
		{"frontend", lifecycle.ActorFrontend, nil, authority.ErrForbidden},
		{"system", lifecycle.ActorSystem, nil, authority.ErrForbidden},
		{"memory-backend", authority.ActorMemoryBackend, nil, authority.ErrForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := stores[0].new(t)
			q := newQueue(t, s, clock.NewFake(t0))
			n := spec("job-1", "agent")
			if tt.mod != nil {
				tt.mod(&n)
			}
			_, err := q.Enqueue(context.Background(), tt.actor, n)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if errors.Is(tt.want, authority.ErrForbidden) {
				var coded interface{ Code() string }
				if !errors.As(err, &coded) || coded.Code() != "FORBIDDEN" {
					t.Fatalf("refusal %v has no FORBIDDEN code", err)
				}
			}
			if n := countKeys(t, s, ""); n != 0 {
				t.Fatalf("refused Enqueue wrote %d keys", n)
			}
		})
	}
}

func TestEnqueueDuplicateAndDefaults(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		q := newQueue(t, s, clock.NewFake(t0))
		j, err := q.Enqueue(context.Background(), lifecycle.ActorOrchestration, jobqueue.NewJob{RunID: "r", JobType: lifecycle.JobResearch, AgentSlug: "a", MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(j.JobID) != 36 || j.MaxAttempts != 5 || j.JobType != lifecycle.JobResearch {
			t.Fatalf("job %+v", j)
		}
		_, err = q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobID: j.JobID, RunID: "r", JobType: lifecycle.JobBrief, AgentSlug: "a"})
		if !errors.Is(err, lifecycle.ErrJobExists) {
			t.Fatalf("duplicate: %v", err)
		}
		if got := get(t, q, j.JobID); got.JobType != lifecycle.JobResearch {
			t.Fatalf("duplicate enqueue changed the job: %+v", got)
		}
	})
}

// failing returns handlers whose NLM call fails with err, counting calls.
func failing(err error, calls *atomic.Int32) jobqueue.Handlers {
	h := okHandlers()
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		calls.Add(1)
		return lifecycle.JobOutput{}, err
	}
	return h
}

// TestRetryScheduleToDead: three failed attempts wait 15 s, 30 s and 60 s;
// after the third wait the job goes FAILED → DEAD, and attempt counts the
// attempts started.
func TestRetryScheduleToDead(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk)
		enqueue(t, q, "job-r", "agent-r")
		var calls atomic.Int32
		h := failing(&jobqueue.StatusError{Code: 503}, &calls)
		for attempt, wait := range []time.Duration{15 * time.Second, 30 * time.Second, 60 * time.Second} {
			c := claim(t, q, "w1")
			if c == nil {
				t.Fatalf("attempt %d: no claim", attempt+1)
			}
			j, err := c.Run(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status != lifecycle.JobRetryBackoff || j.Attempt != attempt+1 || j.ErrorCode != codes.JobUnavailable ||
				j.FailedStep != lifecycle.JobNotebookLMCall || !j.NextAttemptAt.Equal(clk.Now().Add(wait)) {
				t.Fatalf("after attempt %d: %+v", attempt+1, j)
			}
			clk.Advance(wait - time.Nanosecond)
			if c := claim(t, q, "w1"); c != nil {
				t.Fatalf("claimed %v before its backoff of %s elapsed", c.Job(), wait)
			}
			clk.Advance(time.Nanosecond)
		}
		if c := claim(t, q, "w1"); c != nil {
			t.Fatalf("claimed a job with no attempts left: %+v", c.Job())
		}
		j := get(t, q, "job-r")
		if j.Status != lifecycle.JobDead || j.Attempt != 3 || calls.Load() != 3 || j.Error == nil {
			t.Fatalf("final %+v after %d calls", j, calls.Load())
		}
		states := replay(t, s, clk.Now())
		if states["job-r"] != lifecycle.JobDead {
			t.Fatalf("replayed %v", states)
		}
	})
}

// TestOtherProcessWorkAheadOfRetry: a job another process enqueues for an
// agent whose cached lane holds only a retry due later is found within a
// lane refresh, not when the retry falls due.
func TestOtherProcessWorkAheadOfRetry(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q1, q2 := newQueue(t, s, clk), newQueue(t, s, clk)
		enqueue(t, q1, "job-retry", "agent-x")
		var calls atomic.Int32
		if _, err := claim(t, q1, "w1").Run(ctx, failing(errors.New("boom"), &calls)); err != nil {
			t.Fatal(err)
		}
		if c := claim(t, q1, "w1"); c != nil {
			t.Fatalf("claimed %s during its backoff", c.Job().JobID)
		}
		enqueue(t, q2, "job-new", "agent-x")
		clk.Advance(time.Second) // a lane refresh, far short of the 15 s backoff
		c := claim(t, q1, "w1")
		if c == nil || c.Job().JobID != "job-new" {
			t.Fatalf("claimed %v, want job-new", c)
		}
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		code string
	}{
		{&jobqueue.StatusError{Code: 429}, codes.JobRateLimited},
		{&jobqueue.StatusError{Code: 503, Err: errors.New("down")}, codes.JobUnavailable},
		{&jobqueue.StatusError{Code: 500}, "HTTP_500"},
		{context.DeadlineExceeded, codes.JobTimeout},
		{errors.New("boom"), codes.JobHandlerError},
	}
	for _, tt := range tests {
		q := newQueue(t, stores[0].new(t), clock.NewFake(t0))
		enqueue(t, q, "j", "a")
		var calls atomic.Int32
		j, err := claim(t, q, "w").Run(context.Background(), failing(tt.err, &calls))
		if err != nil || j.ErrorCode != tt.code || !strings.Contains(*j.Error, tt.err.Error()) {
			t.Errorf("%v: code %q (%v), want %q", tt.err, j.ErrorCode, err, tt.code)
		}
	}
}

// TestStepTimeout: a handler that hangs is cut off after StepTimeout on the
// queue's clock, and the job retries with TIMEOUT.
func TestStepTimeout(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.StepTimeout = 5 * time.Second; c.LeaseTTL = time.Minute })
		enqueue(t, q, "job-t", "agent-t")
		h := okHandlers()
		started := make(chan struct{})
		h.AssembleContext = func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		c := claim(t, q, "w")
		res := make(chan lifecycle.Job)
		go func() {
			j, err := c.Run(context.Background(), h)
			if err != nil {
				t.Error(err)
			}
			res <- j
		}()
		<-started
		<-clk.WaitForTimers(2) // heartbeat and step timeout
		clk.Advance(5 * time.Second)
		j := <-res
		if j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobTimeout || j.FailedStep != lifecycle.JobContextAssembly {
			t.Fatalf("after timeout %+v", j)
		}
	})
}

func TestRequeueOnlyByAdmin(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.MaxAttempts = 1 })
		enqueue(t, q, "job-q", "agent-q")
		var calls atomic.Int32
		if _, err := claim(t, q, "w").Run(ctx, failing(errors.New("x"), &calls)); err != nil {
			t.Fatal(err)
		}
		// Requeue from RETRY_BACKOFF is no move of the table.
		if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, "job-q"); !errors.Is(err, lifecycle.ErrInvalidTransition) {
			t.Fatalf("requeue from RETRY_BACKOFF: %v", err)
		}
		clk.Advance(15 * time.Second)
		if c := claim(t, q, "w"); c != nil {
			t.Fatal("claimed a job with no attempts left")
		}
		before := get(t, q, "job-q")
		if before.Status != lifecycle.JobDead {
			t.Fatalf("status %s", before.Status)
		}
		for _, actor := range authority.Actors() {
			if actor == lifecycle.ActorAdmin {
				continue
			}
			_, err := q.Requeue(ctx, actor, "job-q")
			var coded interface{ Code() string }
			if !errors.Is(err, lifecycle.ErrForbiddenActor) || !errors.As(err, &coded) || coded.Code() != "FORBIDDEN" {
				t.Fatalf("requeue by %s: %v", actor, err)
			}
		}
		if after := get(t, q, "job-q"); after.UpdatedAt != before.UpdatedAt || after.Status != lifecycle.JobDead {
			t.Fatalf("a refused requeue wrote: %+v", after)
		}
		j, err := q.Requeue(ctx, lifecycle.ActorAdmin, "job-q")
		if err != nil || j.Status != lifecycle.JobQueued || j.Attempt != 0 || j.Error != nil {
			t.Fatalf("requeue: %+v %v", j, err)
		}
		done, err := claim(t, q, "w").Run(ctx, okHandlers())
		if err != nil || done.Status != lifecycle.JobComplete {
			t.Fatalf("after requeue: %+v %v", done, err)
		}
		if st := replay(t, s, clk.Now()); st["job-q"] != lifecycle.JobComplete {
			t.Fatalf("replay %v", st)
		}
	})
}

// TestOneRunningJobPerAgent: while an agent's job runs, no worker claims
// another job of that agent, but other agents' jobs are claimed.
func TestOneRunningJobPerAgent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		clk := clock.NewFake(t0)
		q1 := newQueue(t, s, clk)
		q2 := newQueue(t, s, clk) // a second process sharing the store
		enqueue(t, q1, "a-1", "agent-a")
		enqueue(t, q1, "a-2", "agent-a")
		c1 := claim(t, q1, "w1")
		if c1 == nil || c1.Job().JobID != "a-1" {
			t.Fatalf("first claim %v", c1)
		}
		if c := claim(t, q2, "w2"); c != nil {
			t.Fatalf("second job of a busy agent claimed: %v", c.Job())
		}
		enqueue(t, q2, "b-1", "agent-b")
		c2 := claim(t, q2, "w2")
		if c2 == nil || c2.Job().JobID != "b-1" {
			t.Fatalf("other agent's claim %v", c2)
		}
		if _, err := c1.Run(context.Background(), okHandlers()); err != nil {
			t.Fatal(err)
		}
		// q2 saw the lock held and leaves it alone for a second (q1, which
		// released it, would not wait).
		clk.Advance(time.Second)
		c3 := claim(t, q2, "w2")
		if c3 == nil || c3.Job().JobID != "a-2" {
			t.Fatalf("after the first finished: %v", c3)
		}
		for _, c := range []*jobqueue.Claim{c2, c3} {
			if _, err := c.Run(context.Background(), okHandlers()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestStaleFreedLock: a Queue takes the agent lock it freed last without
// reading it; when another process has used the lock since, that write
// fails and the same Claim reads the lock and takes it after all.
func TestStaleFreedLock(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q1, q2 := newQueue(t, s, clk), newQueue(t, s, clk)
		for _, id := range []string{"a-1", "a-2", "a-3"} {
			enqueue(t, q1, id, "agent-a")
		}
		for i, q := range []*jobqueue.Queue{q1, q2} {
			c := claim(t, q, fmt.Sprintf("w%d", i+1))
			if c == nil {
				t.Fatalf("queue %d claimed nothing", i+1)
			}
			if _, err := c.Run(ctx, okHandlers()); err != nil {
				t.Fatal(err)
			}
		}
		c := claim(t, q1, "w1")
		if c == nil || c.Job().JobID != "a-3" {
			t.Fatalf("claim after another process used the lock: %v", c)
		}
		if _, err := c.Run(ctx, okHandlers()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOrphanRescueAndFencing: a worker that stops heartbeating loses its
// job to the next claim after the lease runs out, and can write nothing
// afterwards.
func TestOrphanRescueAndFencing(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk)
		enqueue(t, q, "job-o", "agent-o")
		paused := claim(t, q, "paused")
		clk.Advance(jobqueue.DefaultLeaseTTL - time.Nanosecond)
		if c := claim(t, q, "w2"); c != nil {
			t.Fatal("claimed while the lease held")
		}
		if j := get(t, q, "job-o"); j.Status != lifecycle.JobContextAssembly {
			t.Fatalf("rescued too early: %s", j.Status)
		}
		// Idle agents' locks are read for orphans at most every LeaseTTL/2,
		// so the rescue comes within half a lease after expiry.
		clk.Advance(jobqueue.DefaultLeaseTTL / 2)
		if c := claim(t, q, "w2"); c != nil {
			t.Fatal("the rescued job must wait out its backoff")
		}
		j := get(t, q, "job-o")
		if j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobLeaseExpired || j.Attempt != 1 || j.Lease != nil {
			t.Fatalf("after rescue %+v", j)
		}
		// The paused worker wakes up: every write is fenced off.
		_, err := paused.Run(ctx, okHandlers())
		if !errors.Is(err, lifecycle.ErrLeaseLost) {
			t.Fatalf("paused worker's run: %v", err)
		}
		if after := get(t, q, "job-o"); after.UpdatedAt != j.UpdatedAt || after.Status != lifecycle.JobRetryBackoff {
			t.Fatalf("fenced worker wrote: %+v", after)
		}
		clk.Advance(15 * time.Second)
		done, err := claim(t, q, "w2").Run(ctx, okHandlers())
		if err != nil || done.Status != lifecycle.JobComplete || done.Attempt != 2 {
			t.Fatalf("retry: %+v %v", done, err)
		}
		if st := replay(t, s, clk.Now()); st["job-o"] != lifecycle.JobComplete {
			t.Fatalf("replay %v", st)
		}
	})
}

// TestHeartbeatKeepsTheLease: a long step keeps its lease alive, so no
// other worker rescues the job.
func TestHeartbeatKeepsTheLease(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk, func(c *jobqueue.Config) { c.StepTimeout = time.Hour })
		enqueue(t, q, "job-h", "agent-h")
		h := okHandlers()
		release := make(chan struct{})
		started := make(chan struct{})
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			close(started)
			<-release
			return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
		}
		c := claim(t, q, "w1")
		res := make(chan error)
		go func() {
			_, err := c.Run(context.Background(), h)
			res <- err
		}()
		<-started
		for range 9 { // three lease lifetimes
			<-clk.WaitForTimers(2) // heartbeat + step timeout
			clk.Advance(jobqueue.DefaultLeaseTTL / 3)
			waitFor(t, func() bool {
				j := get(t, q, "job-h")
				return j.Lease != nil && j.Lease.ExpiresAt.Equal(clk.Now().Add(jobqueue.DefaultLeaseTTL))
			})
		}
		if c := claim(t, q, "w2"); c != nil {
			t.Fatal("a heartbeating job was taken over")
		}
		close(release)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		if j := get(t, q, "job-h"); j.Status != lifecycle.JobComplete || j.Attempt != 1 {
			t.Fatalf("final %+v", j)
		}
	})
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// flakyStore fails Puts whose key and value match, a set number of times.
type flakyStore struct {
	driver.Store
	mu    sync.Mutex
	fails int
	match func(key string, value []byte) bool
}

func (f *flakyStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	f.mu.Lock()
	fail := f.fails > 0 && f.match(key, value)
	if fail {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		// An outage that outlasted the write's deadline: what the store
		// gives once the patient Store stopped waiting (a transient error alone
		// would be waited out).
		return "", &storage.UnavailableError{Op: "put", Key: key, Err: errors.New("injected write error")}
	}
	return f.Store.Put(ctx, key, value, cond)
}

// TestF3CommitFailsAfterArtifactWritten: the artifact is written but the
// COMPLETE write fails; the retry replaces that unreferenced artifact with
// its own, so the job ends COMPLETE with exactly one artifact, its
// completing attempt's, and it was never COMPLETE without it.
func TestF3CommitFailsAfterArtifactWritten(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		fs := &flakyStore{Store: s, fails: 1, match: func(key string, value []byte) bool {
			return strings.HasPrefix(key, "jobs/job-f") && strings.Contains(string(value), `"status":"COMPLETE"`)
		}}
		q := newQueue(t, storage.New(fs), clk)
		enqueue(t, q, "job-f", "agent-f")
		j, err := claim(t, q, "w").Run(ctx, okHandlers())
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != lifecycle.JobRetryBackoff || j.FailedStep != lifecycle.JobArtifactWrite || j.ErrorCode != codes.JobArtifactWriteError {
			t.Fatalf("after failed commit %+v", j)
		}
		if n := countKeys(t, s, "projects/default/artifacts/"); n != 1 {
			t.Fatalf("%d artifacts after the first attempt", n)
		}
		first, _ := q.Artifacts().GetForJob(ctx, lifecycle.ActorOrchestration, "default", "job-f")
		clk.Advance(15 * time.Second)
		h := okHandlers()
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"Other","body":"different","entity_map":{},"word_count":1}`)}, nil
		}
		j, err = claim(t, q, "w").Run(ctx, h)
		if err != nil || j.Status != lifecycle.JobComplete || j.ArtifactID != first.ArtifactID {
			t.Fatalf("retry %+v %v", j, err)
		}
		if n := countKeys(t, s, "projects/default/artifacts/"); n != 1 {
			t.Fatalf("%d artifacts after the retry", n)
		}
		// The first attempt's artifact backs no job (its commit failed), so
		// the retry, of a newer epoch, replaced it with its own: COMPLETE
		// points at the artifact of the attempt that completed.
		a, _ := q.Artifacts().GetForJob(ctx, lifecycle.ActorOrchestration, "default", "job-f")
		if string(a.Content) == string(first.Content) || a.Version != 2 || a.Epoch <= first.Epoch {
			t.Fatalf("the retry's artifact: %s version %d epoch %d (first: epoch %d)", a.Content, a.Version, a.Epoch, first.Epoch)
		}
	})
}

// TestJointEndFindsAnArtifact: on a store that commits, a job's artifact
// is written in the commit of its end; one already there (here an
// unfenced writer's) refuses that commit, and the end goes the other way:
// the artifact replaced under the claim's epoch (fenced), then COMPLETE,
// pointing at it, still in one step to readers, and no write of the
// refused commit landed.
func TestJointEndFindsAnArtifact(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	if !s.CanCommit() {
		t.Fatal("memstore does not commit: the joint end is not reached")
	}
	q := newQueue(t, s, clock.NewFake(t0))
	enqueue(t, q, "job-j", "agent-j")
	old, _, err := q.Artifacts().Create(ctx, lifecycle.ActorNLMBackend, lifecycle.DefaultProject, artifact.Draft{
		JobID: "job-j", RunID: "run_2026-02-24_abc123", Type: artifact.Brief, AgentSlug: "agent-j",
		Content: json.RawMessage(`{"title":"Unfenced","body":"b","entity_map":{},"word_count":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	j, err := claim(t, q, "w").Run(ctx, okHandlers())
	if err != nil || j.Status != lifecycle.JobComplete || j.ArtifactID != old.ArtifactID {
		t.Fatalf("run: %+v %v", j, err)
	}
	a, err := q.Artifacts().GetForJob(ctx, lifecycle.ActorOrchestration, lifecycle.DefaultProject, "job-j")
	if err != nil || a.Version != 2 || a.Epoch == 0 || string(a.Content) != briefContent {
		t.Fatalf("the artifact: %+v %v; want the claim's, version 2", a, err)
	}
}

// TestArtifactWriteErrorRetries: a failing artifact write (invalid
// content, then a store error) sends the job to RETRY_BACKOFF from
// ARTIFACT_WRITE and writes no artifact.
func TestArtifactWriteErrorRetries(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		clk := clock.NewFake(t0)
		fs := &flakyStore{Store: s, fails: 1, match: func(key string, _ []byte) bool { return strings.HasPrefix(key, "projects/") }}
		q := newQueue(t, storage.New(fs), clk)
		enqueue(t, q, "job-w", "agent-w")
		h := okHandlers()
		h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(`{"title":""}`)}, nil
		}
		j, err := claim(t, q, "w").Run(context.Background(), h)
		if err != nil || j.Status != lifecycle.JobRetryBackoff || j.FailedStep != lifecycle.JobArtifactWrite || !strings.Contains(*j.Error, "content") {
			t.Fatalf("invalid content: %+v %v", j, err)
		}
		clk.Advance(15 * time.Second)
		j, err = claim(t, q, "w").Run(context.Background(), okHandlers())
		if err != nil || j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobArtifactWriteError {
			t.Fatalf("store error: %+v %v", j, err)
		}
		if n := countKeys(t, s, "projects/"); n != 0 {
			t.Fatalf("%d artifacts written by failed attempts", n)
		}
		clk.Advance(30 * time.Second)
		j, err = claim(t, q, "w").Run(context.Background(), okHandlers())
		if err != nil || j.Status != lifecycle.JobComplete || j.Attempt != 3 {
			t.Fatalf("third attempt: %+v %v", j, err)
		}
	})
}

// TestReadAuthority covers every actor reading a job: the NLM backend reads
// only its own (the job handed to it, in NOTEBOOKLM_CALL).
func TestReadAuthority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, stores[0].new(t), clk)
	enqueue(t, q, "job-a", "agent")
	check := func(state string, ownNLM bool) {
		for _, actor := range authority.Actors() {
			_, err := q.Get(ctx, actor, "job-a")
			var want bool
			switch actor {
			case lifecycle.ActorGateway, lifecycle.ActorOrchestration, lifecycle.ActorAdmin, lifecycle.ActorFrontend:
				want = true
			case lifecycle.ActorNLMBackend:
				want = ownNLM
			}
			if want != (err == nil) || (err != nil && !errors.Is(err, authority.ErrForbidden)) {
				t.Errorf("%s: Get by %s: %v, want allowed=%v", state, actor, err, want)
			}
		}
	}
	check("QUEUED", false)
	h := okHandlers()
	h.CallNotebookLM = func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
		check("NOTEBOOKLM_CALL", true)
		for j, err := range q.List(ctx, lifecycle.ActorNLMBackend) {
			if !errors.Is(err, authority.ErrForbidden) {
				t.Errorf("NLM backend listed jobs: %v %v", j, err)
			}
		}
		return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, nil
	}
	if _, err := claim(t, q, "w").Run(ctx, h); err != nil {
		t.Fatal(err)
	}
	check("COMPLETE", false)
	n := 0
	for _, err := range q.List(ctx, lifecycle.ActorFrontend) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("List yielded %d jobs", n)
	}
}

// TestClaimCostIsConstantPerJob: the store calls it takes to claim and run
// a job do not grow with the number of jobs waiting, and a lane is listed
// once per batch of jobs, not once per job.
func TestClaimCostIsConstantPerJob(t *testing.T) {
	t.Parallel()
	perJob := map[int]float64{}
	for _, n := range []int{20, 400} {
		cs := &teststores.Counting{Store: stores[0].new(t)}
		clk := clock.NewFake(t0)
		q := newQueue(t, storage.New(cs), clk)
		for i := range n {
			enqueue(t, q, fmt.Sprintf("job-%04d", i), "agent")
		}
		enqueue(t, q, "other-1", "agent-2")
		cs.Reset()
		done := 0
		for {
			c := claim(t, q, "w")
			if c == nil {
				break
			}
			if _, err := c.Run(context.Background(), okHandlers()); err != nil {
				t.Fatal(err)
			}
			done++
		}
		if done != n+1 {
			t.Fatalf("ran %d of %d jobs", done, n+1)
		}
		perJob[n] = float64(cs.Total()) / float64(done)
		if lists := cs.Lists.Load(); lists > int64(n/64+10) {
			t.Errorf("%d jobs took %d List calls", n, lists)
		}
	}
	if perJob[400] > perJob[20]*1.2 || perJob[400] > 25 {
		t.Fatalf("store calls per job grow with the queue: %v", perJob)
	}
	t.Logf("store calls per job: %v", perJob)
}

// TestSweepIfDueOncePerInterval: among workers sharing a store, one sweep
// runs per interval, whoever asks first after it ends; racing askers get
// one sweep between them; the lease is never taken for a job.
func TestSweepIfDueOncePerInterval(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		q1, q2 := newQueue(t, s, clk), newQueue(t, s, clk)
		enqueue(t, q1, "job-1", "agent-a")
		enqueue(t, q1, "job-2", "agent-b")
		sweep := func(q *jobqueue.Queue, w string) bool {
			t.Helper()
			r, swept, err := q.SweepIfDue(ctx, w, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if swept && r.Jobs != 2 {
				t.Fatalf("swept %d jobs, want 2", r.Jobs)
			}
			return swept
		}
		if !sweep(q1, "w1") {
			t.Fatal("the first sweep did not run")
		}
		if sweep(q2, "w2") {
			t.Fatal("a second sweep ran within the interval")
		}
		clk.Advance(time.Minute - time.Nanosecond)
		if sweep(q1, "w1") {
			t.Fatal("swept before the interval ended")
		}
		clk.Advance(time.Nanosecond)
		var n atomic.Int32
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				_, swept, err := []*jobqueue.Queue{q1, q2}[i%2].SweepIfDue(ctx, fmt.Sprintf("w%d", i), time.Minute)
				if err != nil {
					t.Error(err)
				}
				if swept {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		if n.Load() != 1 {
			t.Fatalf("%d of 6 racing workers swept, want 1", n.Load())
		}
		for _, bad := range []struct {
			worker string
			every  time.Duration
		}{{"", time.Minute}, {"../w", time.Minute}, {"w", 0}} {
			if _, _, err := q1.SweepIfDue(ctx, bad.worker, bad.every); err == nil {
				t.Errorf("SweepIfDue(%q, %s) gave no error", bad.worker, bad.every)
			}
		}
	})
}
