package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

const emailType lifecycle.JobType = "SEND_EMAIL"

// emailQueue is a Queue whose one user type, SEND_EMAIL, runs h.
func emailQueue(t *testing.T, clk *clock.Fake, h jobqueue.Handler, mod ...func(*jobqueue.Config)) *jobqueue.Queue {
	t.Helper()
	return newQueue(t, memstore.New(), clk, append([]func(*jobqueue.Config){func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: h}}
		c.Backoff = []time.Duration{time.Minute}
	}}, mod...)...)
}

func enqueueEmail(t *testing.T, q *jobqueue.Queue, id string, maxAttempts int) lifecycle.Job {
	t.Helper()
	j, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, JobType: emailType, AgentSlug: "mailer", MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func sent(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
	return lifecycle.JobOutput{Content: json.RawMessage(`{"sent":true}`)}, nil
}

// moves lists the from → to of the job's audit events, in order.
func moves(t *testing.T, q *jobqueue.Queue, id string) []string {
	t.Helper()
	var out []string
	for e, err := range q.JobEventsForTest(context.Background(), id) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.From+">"+e.To)
	}
	return out
}

// TestGeneralMachine: a job of a user type runs on the general machine,
// QUEUED → RUNNING → COMPLETE, its errors in RUNNING, while an NLM type's
// job keeps the spec's pipeline.
func TestGeneralMachine(t *testing.T) {
	t.Parallel()
	boom := errors.New("smtp down")
	tests := []struct {
		name      string
		attempts  int
		work      func(n int) error // the n-th call's error (from 1)
		want      lifecycle.JobState
		wantCode  string
		wantMoves []string
	}{
		{"succeeds", 3, func(int) error { return nil }, lifecycle.JobComplete, "",
			[]string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>COMPLETE"}},
		{"retried, then succeeds", 3, func(n int) error {
			if n == 1 {
				return boom
			}
			return nil
		}, lifecycle.JobComplete, "",
			[]string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>RETRY_BACKOFF",
				"RETRY_BACKOFF>QUEUED", "QUEUED>RUNNING", "RUNNING>COMPLETE"}},
		{"permanent", 3, func(int) error { return jobqueue.Permanent(boom) }, lifecycle.JobDead, codes.JobPermanent,
			[]string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>RETRY_BACKOFF", "RETRY_BACKOFF>FAILED", "FAILED>DEAD"}},
		{"attempts exhausted", 1, func(int) error { return boom }, lifecycle.JobDead, codes.JobHandlerError,
			[]string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>RETRY_BACKOFF", "RETRY_BACKOFF>FAILED", "FAILED>DEAD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			calls := 0
			q := emailQueue(t, clk, jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				calls++
				if err := tt.work(calls); err != nil {
					return lifecycle.JobOutput{}, err
				}
				return sent(ctx, j)
			}))
			j := enqueueEmail(t, q, "job-e", tt.attempts)
			if j.Machine != lifecycle.JobMachineGeneral || j.Status != lifecycle.JobQueued {
				t.Fatalf("enqueued on %q in %s, want %q QUEUED", j.Machine, j.Status, lifecycle.JobMachineGeneral)
			}
			for range 4 {
				c, err := q.Claim(ctx, "w1")
				if err != nil {
					t.Fatal(err)
				}
				if c == nil {
					clk.Advance(time.Hour) // the backoff, or the bury of an exhausted job
					continue
				}
				if st := c.Job().Status; st != lifecycle.JobRunning {
					t.Fatalf("picked up into %s, want RUNNING", st)
				}
				if _, err := c.Run(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			j = get(t, q, "job-e")
			if j.Status != tt.want || j.ErrorCode != tt.wantCode {
				t.Fatalf("ended %s %q, want %s %q", j.Status, j.ErrorCode, tt.want, tt.wantCode)
			}
			if tt.want == lifecycle.JobDead && j.FailedStep != lifecycle.JobRunning {
				t.Errorf("failed_step %q, want RUNNING: the error is %s in RUNNING", j.FailedStep, j.ErrorCode)
			}
			if got := moves(t, q, "job-e"); !equal(got, tt.wantMoves) {
				t.Errorf("moves %v, want %v", got, tt.wantMoves)
			}
		})
	}
	t.Run("an NLM type keeps the spec's machine", func(t *testing.T) {
		t.Parallel()
		q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(sent))
		j := enqueue(t, q, "job-b", "agent-b")
		if j.Machine != machine.JobMachineSpecName {
			t.Fatalf("BRIEF enqueued on %q", j.Machine)
		}
		c := claim(t, q, "w1")
		if st := c.Job().Status; st != lifecycle.JobContextAssembly {
			t.Fatalf("BRIEF picked up into %s", st)
		}
		if j, err := c.Run(context.Background(), okHandlers()); err != nil || j.Status != lifecycle.JobComplete {
			t.Fatalf("BRIEF ran to %s, %v", j.Status, err)
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCancel: a waiting job ends CANCELLED at once and leaves its lane; a
// finished one, a job of an NLM type and an actor other than the admin
// are refused, and nothing is written.
func TestCancel(t *testing.T) {
	t.Parallel()
	fail := jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, errors.New("later")
	})
	tests := []struct {
		name    string
		h       jobqueue.Handler
		setup   func(t *testing.T, q *jobqueue.Queue) string // the job to cancel
		actor   lifecycle.Actor
		want    lifecycle.JobState // "" when refused
		wantErr error
		code    string
	}{
		{"QUEUED", fail, func(t *testing.T, q *jobqueue.Queue) string { return enqueueEmail(t, q, "j", 3).JobID },
			lifecycle.ActorAdmin, lifecycle.JobCancelled, nil, ""},
		{"RETRY_BACKOFF", fail, func(t *testing.T, q *jobqueue.Queue) string {
			enqueueEmail(t, q, "j", 3)
			if j, _ := claim(t, q, "w1").Run(context.Background(), nil); j.Status != lifecycle.JobRetryBackoff {
				t.Fatalf("ran to %s", j.Status)
			}
			return "j"
		}, lifecycle.ActorAdmin, lifecycle.JobCancelled, nil, ""},
		{"COMPLETE", jobqueue.HandlerFunc(sent), func(t *testing.T, q *jobqueue.Queue) string {
			enqueueEmail(t, q, "j", 3)
			_, _ = claim(t, q, "w1").Run(context.Background(), nil)
			return "j"
		}, lifecycle.ActorAdmin, "", lifecycle.ErrJobFinished, codes.JobFinished},
		{"DEAD", jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such address"))
		}), func(t *testing.T, q *jobqueue.Queue) string {
			enqueueEmail(t, q, "j", 3)
			_, _ = claim(t, q, "w1").Run(context.Background(), nil)
			return "j"
		}, lifecycle.ActorAdmin, "", lifecycle.ErrJobFinished, codes.JobFinished},
		{"CANCELLED", fail, func(t *testing.T, q *jobqueue.Queue) string {
			enqueueEmail(t, q, "j", 3)
			if _, err := q.Cancel(context.Background(), lifecycle.ActorAdmin, "j"); err != nil {
				t.Fatal(err)
			}
			return "j"
		}, lifecycle.ActorAdmin, "", lifecycle.ErrJobFinished, codes.JobFinished},
		{"an NLM type", fail, func(t *testing.T, q *jobqueue.Queue) string { return enqueue(t, q, "j", "agent-b").JobID },
			lifecycle.ActorAdmin, "", lifecycle.ErrJobNotCancellable, codes.JobNotCancellable},
		{"the gateway", fail, func(t *testing.T, q *jobqueue.Queue) string { return enqueueEmail(t, q, "j", 3).JobID },
			lifecycle.ActorGateway, "", lifecycle.ErrForbiddenActor, codes.Forbidden},
		{"the orchestration layer", fail, func(t *testing.T, q *jobqueue.Queue) string { return enqueueEmail(t, q, "j", 3).JobID },
			lifecycle.ActorOrchestration, "", lifecycle.ErrForbiddenActor, codes.Forbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q := emailQueue(t, clk, tt.h)
			id := tt.setup(t, q)
			before := get(t, q, id)
			j, err := q.Cancel(ctx, tt.actor, id)
			if tt.want == "" {
				if !errors.Is(err, tt.wantErr) || lifecycle.ErrorCode(err) != tt.code {
					t.Fatalf("Cancel = %v (%s), want %v (%s)", err, lifecycle.ErrorCode(err), tt.wantErr, tt.code)
				}
				if after := get(t, q, id); after.UpdatedAt != before.UpdatedAt || after.Status != before.Status {
					t.Fatalf("a refused cancel wrote: %s → %s", before.Status, after.Status)
				}
				return
			}
			if err != nil || j.Status != tt.want || j.ErrorCode != codes.JobCancelled || j.ReadyKey != "" {
				t.Fatalf("Cancel = %s %q ready %q, %v", j.Status, j.ErrorCode, j.ReadyKey, err)
			}
			clk.Advance(time.Hour) // a backoff would be over
			if c, err := q.Claim(ctx, "w2"); err != nil || c != nil {
				t.Fatalf("a cancelled job was claimed: %v, %v", c, err)
			}
			if n := countKeys(t, q.StoreForTest(), "queue/lanes/"); n != 0 {
				t.Errorf("%d lane entries left", n)
			}
			got := moves(t, q, id)
			if last := got[len(got)-1]; last != string(before.Status)+">CANCELLED" {
				t.Errorf("last audited move %q, want %s>CANCELLED", last, before.Status)
			}
			if _, err := q.Wait(ctx, id); err != nil {
				t.Errorf("Wait of a cancelled job: %v", err)
			}
		})
	}
}

// TestCancelRunning: a RUNNING job's cancel is asked for; its worker's
// heartbeat reads the request, the handler's context ends, and the job
// ends CANCELLED, not FAILED or retried, even when the handler ignores
// its context (it is left behind as a straggler); and the next write of an
// attempt that finishes first notices it too.
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ignoreCtx bool
		finish    bool // the handler returns before the heartbeat: its commit notices
	}{
		{"handler honours ctx", false, false},
		{"handler ignores ctx", true, false},
		{"attempt finishes first", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			entered, release, ret := make(chan struct{}), make(chan struct{}), make(chan struct{})
			defer close(release)
			q := emailQueue(t, clk, jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				close(entered)
				switch {
				case tt.finish:
					<-ret
					return sent(ctx, j)
				case tt.ignoreCtx:
					<-release
					return sent(ctx, j)
				}
				<-ctx.Done()
				return lifecycle.JobOutput{}, ctx.Err()
			}), func(c *jobqueue.Config) { c.StepTimeout = time.Hour; c.LeaseTTL = 30 * time.Second })
			enqueueEmail(t, q, "j", 3)
			c := claim(t, q, "w1")
			done := make(chan lifecycle.Job)
			go func() {
				j, err := c.Run(ctx, nil)
				if err != nil {
					t.Error(err)
				}
				done <- j
			}()
			<-entered
			<-clk.WaitForTimers(2) // the step's deadline and the heartbeat
			j, err := q.Cancel(ctx, lifecycle.ActorAdmin, "j")
			if err != nil || j.Status != lifecycle.JobRunning || j.CancelRequestedAt == nil || j.CancelRequestedBy != lifecycle.ActorAdmin {
				t.Fatalf("Cancel of a RUNNING job = %s asked %v by %q, %v", j.Status, j.CancelRequestedAt, j.CancelRequestedBy, err)
			}
			if tt.finish {
				close(ret)
			} else {
				clk.Advance(10 * time.Second) // the heartbeat, LeaseTTL/3 on
			}
			j = <-done
			if j.Status != lifecycle.JobCancelled || j.ErrorCode != codes.JobCancelled || j.Attempt != 1 || j.Lease != nil || j.ArtifactID != "" {
				t.Fatalf("ran to %s %q attempt %d lease %v artifact %q, want CANCELLED", j.Status, j.ErrorCode, j.Attempt, j.Lease, j.ArtifactID)
			}
			if live, _ := q.Stragglers(); tt.ignoreCtx && live != 1 {
				t.Errorf("%d stragglers, want the handler that ignores ctx left behind", live)
			}
			if got := moves(t, q, "j"); got[len(got)-1] != "RUNNING>CANCELLED" {
				t.Errorf("moves %v", got)
			}
			clk.Advance(time.Hour)
			if c, err := q.Claim(ctx, "w2"); err != nil || c != nil {
				t.Fatalf("a cancelled job was claimed again: %v, %v", c, err)
			}
			if _, err := q.Cancel(ctx, lifecycle.ActorAdmin, "j"); !errors.Is(err, lifecycle.ErrJobFinished) {
				t.Errorf("second Cancel: %v, want ErrJobFinished", err)
			}
		})
	}
}

// TestNewerRecordLeftAlone: a job record naming a job machine this release
// does not know (a later release's) is read as an error that is neither
// not-found nor corrupt, left out of lists, and neither quarantined nor
// written by a read, a claim or the sweep; its lane entry stays.
func TestNewerRecordLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := emailQueue(t, clk, jobqueue.HandlerFunc(sent))
	enqueueEmail(t, q, "job-future", 3)
	s := q.StoreForTest()
	b, _, err := s.Get(ctx, "jobs/job-future.json")
	if err != nil {
		t.Fatal(err)
	}
	newer := strings.Replace(strings.Replace(string(b), `"machine":"general-job"`, `"machine":"future-job"`, 1), `"status":"QUEUED"`, `"status":"PAUSED"`, 1)
	if newer == string(b) {
		t.Fatalf("the record has no machine to replace: %s", b)
	}
	if _, err := s.Put(ctx, "jobs/job-future.json", []byte(newer), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	_, err = q.Get(ctx, lifecycle.ActorAdmin, "job-future")
	if err == nil || errors.Is(err, storage.ErrNotFound) || errors.Is(err, lifecycle.ErrCorrupt) || !strings.Contains(err.Error(), "future-job") {
		t.Fatalf("Get of a later release's record = %v, want its own error", err)
	}
	if page, err := q.ListPage(ctx, lifecycle.ActorAdmin, jobqueue.JobQuery{}); err != nil || len(page.Jobs) != 0 {
		t.Fatalf("ListPage = %d jobs, %v; want the record left out", len(page.Jobs), err)
	}
	_, _ = q.Claim(ctx, "w1") // may answer the record's error; writes nothing
	clk.Advance(time.Hour)
	_, _ = q.Sweep(ctx)
	after, _, err := s.Get(ctx, "jobs/job-future.json")
	if err != nil || string(after) != newer || q.Quarantined() != 0 {
		t.Fatalf("the record was touched (%v, %d quarantined): %s", err, q.Quarantined(), after)
	}
	if n := countKeys(t, s, "queue/lanes/"); n != 1 {
		t.Errorf("%d lane entries, want its entry kept", n)
	}
}

// TestCancelOfAnOrphan: a RUNNING job whose worker died after its cancel
// was asked for ends CANCELLED when its lease lapses and it is rescued (by
// the sweep or the next claim of its agent), not retried.
func TestCancelOfAnOrphan(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"sweep", "claim"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q := emailQueue(t, clk, jobqueue.HandlerFunc(sent))
			enqueueEmail(t, q, "j", 3)
			enqueueEmail(t, q, "k", 3) // the agent's next job, for the claim
			if c := claim(t, q, "dead-worker"); c.Job().JobID != "j" {
				t.Fatalf("claimed %s", c.Job().JobID)
			} // never run: its worker died
			if j, err := q.Cancel(ctx, lifecycle.ActorAdmin, "j"); err != nil || j.Status != lifecycle.JobRunning {
				t.Fatalf("Cancel = %s, %v", j.Status, err)
			}
			clk.Advance(time.Hour) // the lease lapses
			if by == "sweep" {
				if _, err := q.Sweep(ctx); err != nil {
					t.Fatal(err)
				}
			} else if c := claim(t, q, "w2"); c == nil || c.Job().JobID != "k" {
				t.Fatalf("the next claim took %v", c)
			}
			j := get(t, q, "j")
			if j.Status != lifecycle.JobCancelled || j.ErrorCode != codes.JobCancelled || j.ReadyKey != "" || j.Lease != nil {
				t.Fatalf("the orphan is %s %q ready %q lease %v, want CANCELLED", j.Status, j.ErrorCode, j.ReadyKey, j.Lease)
			}
			if got := moves(t, q, "j"); got[len(got)-1] != "RUNNING>CANCELLED" {
				t.Errorf("moves %v", got)
			}
		})
	}
}

// TestRollingUpgradeWritesWhatThePreviousReleaseReads: while Workers of the
// previous release share the store (Config.RollingUpgrade), a job of a
// user type runs on the spec's machine, whose states every release knows
// (the previous one quarantines a RUNNING job), and a priority, whose lane
// key the previous release drops, is refused, alone or in a batch.
func TestRollingUpgradeWritesWhatThePreviousReleaseReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := emailQueue(t, clk, jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) { c.RollingUpgrade = true })
	j := enqueueEmail(t, q, "job-r", 3)
	if j.Machine != machine.JobMachineSpecName {
		t.Fatalf("enqueued on %q during a rolling upgrade, want the spec's machine", j.Machine)
	}
	c := claim(t, q, "w1")
	if st := c.Job().Status; st != lifecycle.JobContextAssembly {
		t.Fatalf("picked up into %s, want CONTEXT_ASSEMBLY (the spec's machine)", st)
	}
	if _, err := c.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if j := get(t, q, "job-r"); j.Status != lifecycle.JobComplete {
		t.Fatalf("ended %s", j.Status)
	}
	high := jobqueue.NewJob{JobID: "job-p", JobType: emailType, AgentSlug: "mailer", Priority: lifecycle.MaxPriority}
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, high); !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("a priority during a rolling upgrade: %v, want ErrInvalidJob", err)
	}
	if _, err := q.EnqueueMany(ctx, lifecycle.ActorGateway, []jobqueue.NewJob{{JobType: emailType}, high}); !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("a batch with a priority during a rolling upgrade: %v, want ErrInvalidJob", err)
	}
	if _, err := q.Job(ctx, "job-p"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the refused job was written: %v", err)
	}
	def := jobqueue.NewJob{JobID: "job-d", JobType: emailType, AgentSlug: "mailer", Priority: lifecycle.DefaultPriority}
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, def); err != nil {
		t.Fatalf("the default priority, given: %v", err)
	}
}
