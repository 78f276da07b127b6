package nlm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// lateHandler serves the sink once the processor has a Sink to give it
// (the Runner needs the processor's steps, the sink needs the Runner), and
// only after gate is closed.
type lateHandler struct {
	h    http.Handler
	gate chan struct{}
}

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	<-l.gate
	l.h.ServeHTTP(w, r)
}

// parkedAndFreed returns an onPut hook that closes gate once the run has
// parked and, after that, its runner freed the run's slot: the parking
// execution is over. A Deliver made while the parking execution is still
// registered in its Runner is picked up only by the Runner's next poll (a
// PollInterval later; on the fake clock, never), so the callback is held
// until then, as a real callback would arrive later than the park.
func parkedAndFreed(gate chan struct{}) func(key string, v []byte) {
	var mu sync.Mutex
	parked, closed := false, false
	return func(key string, v []byte) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasSuffix(key, "/status.json") && strings.Contains(string(v), `"status":"waiting_external"`):
			parked = true
		case parked && !closed && strings.Contains(key, "/slots/"):
			closed = true
			close(gate)
		}
	}
}

// TestAskParksAndResumes: a run on the approval machine enqueues an NLM
// job and parks in waiting_external; the processor runs the job; its
// callback, posted to Sink, resumes the run through Runner.Deliver; the
// run ends with the NLM result in its step output, or fails
// NLM_UNAVAILABLE when the job ended in ERROR. Memstore, fake clock.
func TestAskParksAndResumes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		failAt  string
		status  string
		errCode string
	}{
		{"done", "", "completed", ""},
		{"nlm error", "query", "failed", codes.NLMUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			s := watch(memstore.New())
			late := &lateHandler{gate: make(chan struct{})}
			s.onPut = parkedAndFreed(late.gate)
			post := newPoster(late)
			p := newProcessor(t, nlm.Config{Store: storage.New(s), Clock: clk, Owner: "nlm-1", Client: post,
				CallbackURL: "https://conveyor.example/nlm/callback"}, stagesFailingAt(tt.failAt))
			var parked run.StepInput
			steps := nlm.Ask(p, "brief", func(_ context.Context, in run.StepInput) (lifecycle.NLMRequest, error) {
				parked = in
				return lifecycle.NLMRequest{JobType: lifecycle.JobBrief, Query: "brief on " + string(in.Input)}, nil
			})
			r, err := run.NewRunner(run.Config{Store: storage.New(s), Clock: clk, Owner: "runner-1", Logger: quiet, Node: "test"},
				run.Agent{Slug: "researcher", Machine: lifecycle.MachineApproval, Steps: steps})
			if err != nil {
				t.Fatal(err)
			}
			late.h = nlm.Sink(r, p)
			rctx, stopRunner := context.WithCancel(ctx)
			runnerDone := make(chan struct{})
			go func() { defer close(runnerDone); _ = r.Run(rctx) }()
			defer func() { stopRunner(); <-runnerDone }()
			runProcessor(t, p, 5*time.Second)

			res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "researcher", Input: json.RawMessage(`"violin"`)})
			if err != nil {
				t.Fatal(err)
			}
			// The callback reaches the sink, which resumes the parked run.
			cb := post.next(t)
			wantCB := map[string]string{"": "COMPLETE", "query": "FAILED"}[tt.failAt]
			if cb.Status != wantCB {
				t.Fatalf("callback %+v, want %s", cb, wantCB)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			st, err := r.Wait(wctx, res.RunID)
			if err != nil || st.Status != tt.status {
				t.Fatalf("run ended %+v %v, want %s", st, err, tt.status)
			}
			if st.External == nil || st.External.EventType != "nlm_result:"+cb.JobID || st.External.EventID != cb.JobID || st.External.ReceivedAt == nil {
				t.Fatalf("external wait %+v", st.External)
			}
			if parked.RunID != res.RunID || parked.Step != 1 {
				t.Fatalf("ask step input %+v", parked)
			}
			job, err := p.Get(ctx, cb.JobID)
			if err != nil || job.Request.RunID != res.RunID || job.Request.AgentSlug != "researcher" || job.Request.Query != `brief on "violin"` {
				t.Fatalf("NLM job %+v %v", job, err)
			}
			stepFiles, err := r.Steps(ctx, res.RunID)
			if err != nil || len(stepFiles) != 2 {
				t.Fatalf("steps %+v %v", stepFiles, err)
			}
			if tt.errCode != "" {
				if st.Error == nil || !strings.HasPrefix(*st.Error, tt.errCode+": ") || stepFiles[1].Status != lifecycle.StepFailed {
					t.Fatalf("run error %v, result step %+v; want %s", st.Error, stepFiles[1], tt.errCode)
				}
				return
			}
			var got nlm.Result
			if err := json.Unmarshal(stepFiles[1].Output, &got); err != nil {
				t.Fatalf("result step output %s: %v", stepFiles[1].Output, err)
			}
			if got.JobID != cb.JobID || got.ArtifactID != artifact.IDForJob(cb.JobID) || string(got.Content) != briefContent {
				t.Fatalf("result %+v", got)
			}
			// The processor ends the job DONE once the sink answered.
			s.until(t, "NLM job DONE", jobIs(p, cb.JobID, lifecycle.NLMDone))
			// A repeated callback (a retry after a lost answer) is
			// acknowledged and changes nothing.
			if rec := post.replay(t, cb); rec != http.StatusNoContent {
				t.Fatalf("repeated callback answered %d", rec)
			}
			if again, _ := r.Status(ctx, res.RunID); again.Version != st.Version {
				t.Fatalf("repeated callback wrote the run: %+v", again)
			}
		})
	}
}
