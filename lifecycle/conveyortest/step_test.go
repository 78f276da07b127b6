package conveyortest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/conveyortest"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// code is the code of a status's error, "CODE: message".
func code(st lifecycle.RunStatus) string {
	if st.Error == nil {
		return ""
	}
	c, _, _ := strings.Cut(*st.Error, ":")
	return c
}

// stepScript is a step whose attempt n does what script[n-1] says ("ok",
// "hang", "err", "503", "permanent"); the last entry repeats.
func stepScript(calls *atomic.Int32, script ...string) func(context.Context, run.StepInput) (run.StepOutput, error) {
	return func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		calls.Add(1)
		what := script[min(in.Attempt, len(script))-1]
		switch what {
		case "ok":
			return run.StepOutput{Summary: "done on attempt " + string(rune('0'+in.Attempt)), Data: json.RawMessage(`{"ok":true}`)}, nil
		case "hang":
			return run.StepOutput{}, conveyortest.Hang(ctx)
		case "503":
			return run.StepOutput{}, lifecycle.NewRunError(codes.NLMUnavailable, "503 from NotebookLM")
		case "permanent":
			return run.StepOutput{}, &lifecycle.RunError{Code: codes.UpstreamUnavailable, Message: "gone", Permanent: true}
		}
		return run.StepOutput{}, errors.New("boom")
	}
}

func TestRunStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   []string
		opts     []conveyortest.RunnerOption
		timeout  time.Duration
		status   string
		code     string
		calls    int32
		duration time.Duration // fake time from request to end
		summary  string
	}{
		{name: "ok", script: []string{"ok"}, status: "completed", calls: 1, summary: "done on attempt 1"},
		{name: "retried after 1s and 2s", script: []string{"503", "err", "ok"}, status: "completed", calls: 3, duration: 3 * time.Second, summary: "done on attempt 3"},
		{name: "retries exhausted", script: []string{"err"}, status: "failed", code: codes.InternalError, calls: 4, duration: 7 * time.Second},
		{name: "coded error kept", script: []string{"503"}, status: "failed", code: codes.NLMUnavailable, calls: 4, duration: 7 * time.Second},
		{name: "permanent not retried", script: []string{"permanent"}, status: "failed", code: codes.UpstreamUnavailable, calls: 1},
		{name: "hangs then answers", script: []string{"hang", "ok"}, status: "completed", calls: 2, duration: 121 * time.Second, summary: "done on attempt 2"},
		{name: "hangs every time", script: []string{"hang"}, status: "failed", code: codes.AgentTimeout, calls: 4, duration: 4*120*time.Second + 7*time.Second},
		{name: "step's own timeout", script: []string{"hang"}, timeout: 5 * time.Second, status: "failed", code: codes.AgentTimeout, calls: 4, duration: 4*5*time.Second + 7*time.Second},
		{name: "no retries", script: []string{"hang", "ok"}, opts: []conveyortest.RunnerOption{func(c *run.Config) { c.StepRetries = -1 }},
			status: "failed", code: codes.AgentTimeout, calls: 1, duration: 120 * time.Second},
		{name: "run timeout first", script: []string{"hang"}, opts: []conveyortest.RunnerOption{func(c *run.Config) { c.RunTimeout = 200 * time.Second }},
			status: "failed", code: codes.AgentTimeout, calls: 2, duration: 200 * time.Second},
		{name: "own backoff", script: []string{"err", "ok"}, opts: []conveyortest.RunnerOption{func(c *run.Config) { c.RetryBackoff = time.Minute }},
			status: "completed", calls: 2, duration: time.Minute, summary: "done on attempt 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			out, st := conveyortest.RunStep(t, run.Step{Name: "work", Run: stepScript(&calls, tt.script...), Timeout: tt.timeout}, nil, tt.opts...)
			if st.Status != tt.status || code(st) != tt.code {
				t.Errorf("status %s, code %q; want %s, %q (error %v)", st.Status, code(st), tt.status, tt.code, st.Error)
			}
			if got := calls.Load(); got != tt.calls {
				t.Errorf("%d attempts, want %d", got, tt.calls)
			}
			if got := st.FinishedAt.Sub(st.StartedAt); got != tt.duration {
				t.Errorf("took %v of fake time, want %v", got, tt.duration)
			}
			if out.Summary != tt.summary {
				t.Errorf("summary %q, want %q", out.Summary, tt.summary)
			}
		})
	}
}
