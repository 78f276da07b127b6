package conveyortest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
)

const brief = `{"title":"t","body":"b","entity_map":{},"word_count":1}`

// jobScript is a CallNotebookLM whose attempt n does what script[n-1] says
// ("ok", "hang", "429", "err", "permanent", "bad"); the last entry repeats.
// A job that runs out of attempts still waits its last backoff (15 s, 30 s,
// 60 s) before it goes FAILED and DEAD (docs/spec.md#job-lifecycle).
func jobScript(calls *atomic.Int32, script ...string) jobqueue.Handlers {
	return jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		n := int(calls.Add(1))
		switch script[min(n, len(script))-1] {
		case "ok":
			return lifecycle.JobOutput{Content: json.RawMessage(brief)}, nil
		case "bad":
			return lifecycle.JobOutput{Content: json.RawMessage(`{"title":1}`)}, nil
		case "hang":
			return lifecycle.JobOutput{}, conveyortest.Hang(ctx)
		case "429":
			return lifecycle.JobOutput{}, &jobqueue.StatusError{Code: 429, Err: errors.New("slow down")}
		case "permanent":
			return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such notebook"))
		}
		return lifecycle.JobOutput{}, errors.New("boom")
	}}
}

func TestRunJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  []string
		opts    []conveyortest.QueueOption
		job     func(*jobqueue.NewJob)
		state   lifecycle.JobState
		code    string
		calls   int32
		elapsed time.Duration // fake time from enqueue to the last write
	}{
		{name: "complete", script: []string{"ok"}, state: lifecycle.JobComplete, calls: 1},
		{name: "rate limited once", script: []string{"429", "ok"}, state: lifecycle.JobComplete, calls: 2, elapsed: 15 * time.Second},
		{name: "hangs then answers", script: []string{"hang", "ok"}, state: lifecycle.JobComplete, calls: 2, elapsed: 135 * time.Second},
		{name: "attempts exhausted", script: []string{"err"}, state: lifecycle.JobDead, code: codes.JobHandlerError, calls: 3, elapsed: 105 * time.Second},
		{name: "hangs every time", script: []string{"hang"}, state: lifecycle.JobDead, code: codes.JobTimeout, calls: 3, elapsed: 3*120*time.Second + 105*time.Second},
		{name: "permanent", script: []string{"permanent"}, state: lifecycle.JobDead, code: codes.JobPermanent, calls: 1},
		{name: "content refused", script: []string{"bad", "ok"}, state: lifecycle.JobComplete, calls: 2, elapsed: 15 * time.Second},
		{name: "own timeout and schedule", script: []string{"hang", "hang", "ok"},
			opts:  []conveyortest.QueueOption{func(c *jobqueue.Config) { c.StepTimeout = 5 * time.Second; c.Backoff = []time.Duration{time.Second} }},
			state: lifecycle.JobComplete, calls: 3, elapsed: 12 * time.Second},
		{name: "one attempt", script: []string{"err", "ok"},
			opts:  []conveyortest.QueueOption{func(c *jobqueue.Config) { c.MaxAttempts = 1 }},
			state: lifecycle.JobDead, code: codes.JobHandlerError, calls: 1, elapsed: 15 * time.Second},
		// A job to run later runs when the fake clock reaches its time.
		{name: "delayed", script: []string{"ok"}, job: func(n *jobqueue.NewJob) { n.Delay = time.Hour },
			state: lifecycle.JobComplete, calls: 1, elapsed: time.Hour},
		{name: "run at, then retried", script: []string{"err", "ok"}, job: func(n *jobqueue.NewJob) { n.RunAt = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC) },
			state: lifecycle.JobComplete, calls: 2, elapsed: time.Date(2026, 3, 1, 0, 0, 15, 0, time.UTC).Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}, // the helpers start at 2026-01-01
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			n := jobqueue.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"}
			if tt.job != nil {
				tt.job(&n)
			}
			job, art := conveyortest.RunJob(t, jobScript(&calls, tt.script...), n, tt.opts...)
			if job.Status != tt.state || job.ErrorCode != tt.code {
				t.Errorf("job %s %q, want %s %q (error %v)", job.Status, job.ErrorCode, tt.state, tt.code, job.Error)
			}
			if got := calls.Load(); got != tt.calls {
				t.Errorf("%d calls, want %d", got, tt.calls)
			}
			if got := job.UpdatedAt.Sub(job.CreatedAt); got != tt.elapsed {
				t.Errorf("took %v of fake time, want %v", got, tt.elapsed)
			}
			if (art != nil) != (tt.state == lifecycle.JobComplete) {
				t.Fatalf("artifact %v for a %s job", art, job.Status)
			}
			if art != nil && (!art.Finalized || art.JobID != job.JobID || string(art.Content) != brief) {
				t.Errorf("artifact %+v", art)
			}
		})
	}
}

func TestRunJobUserType(t *testing.T) {
	t.Parallel()
	summary := jobqueue.TypeConfig{
		Handler: jobqueue.Handlers{
			AssembleContext: func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
				if job.Attempt == 1 {
					return nil, conveyortest.Hang(ctx)
				}
				return json.RawMessage(`"ctx"`), nil
			},
			CallNotebookLM: func(ctx context.Context, job lifecycle.Job, snap json.RawMessage) (lifecycle.JobOutput, error) {
				return lifecycle.JobOutput{Content: json.RawMessage(`{"summary":` + string(snap) + `}`)}, nil
			},
		},
	}
	job, art := conveyortest.RunJob(t, jobqueue.Handlers{}, jobqueue.NewJob{RunID: "run-1", JobType: "SUMMARY", AgentSlug: "agent-a"},
		func(c *jobqueue.Config) { c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{"SUMMARY": summary} })
	if job.Status != lifecycle.JobComplete || job.Attempt != 2 || art == nil || string(art.Content) != `{"summary":"ctx"}` || art.Type != "SUMMARY" {
		t.Fatalf("job %+v, artifact %+v", job, art)
	}
}

func TestRequireJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := jobqueue.New(jobqueue.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	if j := conveyortest.RequireJob(t, q, "job-1", lifecycle.JobQueued); j.Attempt != 0 {
		t.Errorf("attempt %d", j.Attempt)
	}
	tests := []struct {
		name  string
		id    string
		state lifecycle.JobState
		want  string
	}{
		{"wrong state", "job-1", lifecycle.JobComplete, "conveyortest: job job-1 is QUEUED, want COMPLETE (attempt 0 of 3)"},
		{"no such job", "job-2", lifecycle.JobQueued, "conveyortest: no job job-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := failure(func(tb testing.TB) { conveyortest.RequireJob(tb, q, tt.id, tt.state) }); got != tt.want {
				t.Errorf("failed with %q, want %q", got, tt.want)
			}
		})
	}
}

func TestJobFailures(t *testing.T) { // not parallel: it shortens the stall
	defer conveyortest.SetStall(50 * time.Millisecond)()
	release := make(chan struct{})
	tests := []struct {
		name string
		fn   func(tb testing.TB)
		want string
	}{
		{"a handler that blocks without Hang", func(tb testing.TB) {
			conveyortest.RunJob(tb, jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return lifecycle.JobOutput{}, errors.New("released")
			}}, jobqueue.NewJob{JobID: "job-1", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"})
		}, "attempt 1 of job job-1 has not ended after 50ms of real time: a handler that should hang in a test must wait with conveyortest.Hang(ctx)"},
		{"an invalid job", func(tb testing.TB) {
			conveyortest.RunJob(tb, jobqueue.Handlers{}, jobqueue.NewJob{JobID: "../x", JobType: lifecycle.JobBrief})
		}, "conveyortest: enqueue: jobqueue: invalid job"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure(tt.fn); !strings.Contains(got, tt.want) {
				t.Errorf("failed with %q, want it to contain %q", got, tt.want)
			}
		})
	}
	close(release)
}

// TestRunJobRegistersType: a job of a type of the user's that no option
// registers runs with the handler RunJob is given, retried on the fake
// clock; an option's TypeConfig without a Handler keeps its settings and
// gets the handler.
func TestRunJobRegistersType(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := jobqueue.Typed(func(ctx context.Context, to string) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("smtp down")
		}
		return "sent to " + to, nil
	})
	tests := []struct {
		name    string
		opts    []conveyortest.QueueOption
		elapsed time.Duration
	}{
		{"no options", nil, 15 * time.Second},
		{"the type's settings, no Handler", []conveyortest.QueueOption{func(c *jobqueue.Config) {
			c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{"SEND_EMAIL": {Backoff: []time.Duration{time.Second}}}
		}}, time.Second},
	}
	for _, tt := range tests {
		calls.Store(0)
		job, art := conveyortest.RunJob(t, h, jobqueue.NewJob{JobType: "SEND_EMAIL", Payload: json.RawMessage(`"ada"`)}, tt.opts...)
		if job.Status != lifecycle.JobComplete || job.Attempt != 2 || art == nil || string(art.Content) != `"sent to ada"` {
			t.Fatalf("%s: %s on attempt %d, artifact %v", tt.name, job.Status, job.Attempt, art)
		}
		if got := job.UpdatedAt.Sub(job.CreatedAt); got != tt.elapsed {
			t.Errorf("%s: took %v of fake time, want %v", tt.name, got, tt.elapsed)
		}
	}
}
