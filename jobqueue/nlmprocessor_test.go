package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// callbackServer records the callbacks it gets; it answers with the
// statuses in fail first, then 200.
type callbackServer struct {
	*httptest.Server
	mu   sync.Mutex
	got  []jobqueue.CallbackBody
	fail []int
}

func newCallbackServer(t *testing.T, fail ...int) *callbackServer {
	cs := &callbackServer{fail: fail}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b jobqueue.CallbackBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || r.Method != http.MethodPost || r.URL.Path != "/jobs/"+b.JobID+"/result" {
			t.Errorf("bad callback %s %s: %v", r.Method, r.URL, err)
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.got = append(cs.got, b)
		if len(cs.fail) > 0 {
			w.WriteHeader(cs.fail[0])
			cs.fail = cs.fail[1:]
		}
	}))
	t.Cleanup(cs.Close)
	return cs
}

func (cs *callbackServer) bodies() []jobqueue.CallbackBody {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]jobqueue.CallbackBody(nil), cs.got...)
}

func nlmSteps(failAt string) jobqueue.NLMSteps {
	boom := func(step string) error {
		if step == failAt {
			return &jobqueue.StatusError{Code: 503, Err: errors.New(step + " down")}
		}
		return nil
	}
	return jobqueue.NLMSteps{
		FetchContext: func(ctx context.Context, req jobqueue.NLMRequest) (json.RawMessage, error) {
			return json.RawMessage(`{"notes":["a"]}`), boom("fetch")
		},
		BuildPrompt: func(ctx context.Context, req jobqueue.NLMRequest, snap json.RawMessage) (string, error) {
			return req.Query + string(snap), boom("prompt")
		},
		Query: func(ctx context.Context, req jobqueue.NLMRequest, prompt string) (json.RawMessage, error) {
			return json.RawMessage(`{"text":"answer"}`), boom("query")
		},
		Structure: func(ctx context.Context, req jobqueue.NLMRequest, answer json.RawMessage) (jobqueue.Output, error) {
			if failAt == "content" {
				return jobqueue.Output{Content: json.RawMessage(`{"title":""}`)}, nil
			}
			return jobqueue.Output{Content: json.RawMessage(briefContent)}, boom("structure")
		},
	}
}

func newProcessor(t *testing.T, s storage.Store, cs *callbackServer, failAt string) *jobqueue.NLMProcessor {
	p, err := jobqueue.NewNLMProcessor(jobqueue.NLMConfig{Store: s, Client: cs.Client(), Clock: clock.Real(),
		CallbackBackoff: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)}, nlmSteps(failAt))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func nlmRequest(cs *callbackServer, id string) jobqueue.NLMRequest {
	return jobqueue.NLMRequest{JobID: id, RunID: "run-1", JobType: jobqueue.JobBrief, AgentSlug: "agent",
		Query: "q", Callback: cs.URL + "/jobs/" + id + "/result"}
}

func TestNLMProcessorDone(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		p := newProcessor(t, s, cs, "")
		j, err := p.Accept(ctx, nlmRequest(cs, "job-n"))
		if err != nil || j.Status != jobqueue.NLMAccepted {
			t.Fatalf("accept %+v %v", j, err)
		}
		if again, err := p.Accept(ctx, nlmRequest(cs, "job-n")); err != nil || again.Status != jobqueue.NLMAccepted {
			t.Fatalf("second accept %+v %v", again, err)
		}
		j, err = p.Process(ctx, "job-n")
		if err != nil || j.Status != jobqueue.NLMDone || j.ArtifactID != artifact.IDForJob("job-n") {
			t.Fatalf("process %+v %v", j, err)
		}
		if b := cs.bodies(); len(b) != 1 || b[0] != (jobqueue.CallbackBody{JobID: "job-n", Status: "COMPLETE", ArtifactID: j.ArtifactID}) {
			t.Fatalf("callbacks %+v", b)
		}
		// Every move is audited, by the NLM backend, in pipeline order.
		var moves []string
		for ev, err := range storage.ReadAuditDay(ctx, s, time.Now()) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Event == "nlm.status.update" {
				if ev.Actor != "nlm-backend" {
					t.Fatalf("actor %s", ev.Actor)
				}
				moves = append(moves, ev.To)
			}
		}
		if got := strings.Join(moves, ","); got != "ACCEPTED,FETCHING_CONTEXT,BUILDING_PROMPT,NLM_QUERY,STRUCTURING,CALLBACK,DONE" {
			t.Fatalf("audited %s", got)
		}
		// A processed job cannot run again.
		if _, err := p.Process(ctx, "job-n"); !errors.Is(err, lifecycle.ErrTerminalState) {
			t.Fatalf("reprocessing: %v", err)
		}
	})
}

// TestNLMProcessorErrors: a failure at any step ends in ERROR with a
// FAILED callback; a callback that cannot be delivered ends in ERROR too.
func TestNLMProcessorErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		failAt   string
		fail     []int
		wantFrom string
		callback []string
	}{
		{"fetch", nil, "FETCHING_CONTEXT", []string{"FAILED"}},
		{"prompt", nil, "BUILDING_PROMPT", []string{"FAILED"}},
		{"query", nil, "NLM_QUERY", []string{"FAILED"}},
		{"structure", nil, "STRUCTURING", []string{"FAILED"}},
		{"content", nil, "STRUCTURING", []string{"FAILED"}},
		{"", []int{500, 503}, "", []string{"COMPLETE", "COMPLETE", "COMPLETE"}},              // delivered on the third try
		{"", []int{500, 500, 500}, "CALLBACK", []string{"COMPLETE", "COMPLETE", "COMPLETE"}}, // never delivered
	}
	for _, tt := range tests {
		cs := newCallbackServer(t, tt.fail...)
		s := stores[0].new(t)
		p := newProcessor(t, s, cs, tt.failAt)
		j, err := p.Handle(context.Background(), nlmRequest(cs, "job-e"))
		if err != nil {
			t.Fatalf("%s: %v", tt.failAt, err)
		}
		want := jobqueue.NLMError
		if tt.wantFrom == "" {
			want = jobqueue.NLMDone
		}
		if j.Status != want || (want == jobqueue.NLMError && !strings.HasPrefix(j.Error, tt.wantFrom)) {
			t.Errorf("%s %v: ended %+v", tt.failAt, tt.fail, j)
		}
		var statuses []string
		for _, b := range cs.bodies() {
			statuses = append(statuses, b.Status)
			if b.Status == "FAILED" && (b.Error == "" || b.ArtifactID != "") {
				t.Errorf("%s: FAILED callback %+v", tt.failAt, b)
			}
		}
		if strings.Join(statuses, ",") != strings.Join(tt.callback, ",") {
			t.Errorf("%s %v: callbacks %v, want %v", tt.failAt, tt.fail, statuses, tt.callback)
		}
		if tt.failAt != "" && tt.failAt != "structure" {
			// No artifact for a job that failed before structuring.
			for k, err := range s.List(context.Background(), "projects/") {
				t.Errorf("%s: artifact %s %v", tt.failAt, k, err)
			}
		}
	}
}

func TestNLMAcceptValidation(t *testing.T) {
	t.Parallel()
	cs := newCallbackServer(t)
	s := stores[0].new(t)
	p := newProcessor(t, s, cs, "")
	for _, mod := range []func(*jobqueue.NLMRequest){
		func(r *jobqueue.NLMRequest) { r.JobID = "../x" },
		func(r *jobqueue.NLMRequest) { r.AgentSlug = "" },
		func(r *jobqueue.NLMRequest) { r.JobType = "X" },
		func(r *jobqueue.NLMRequest) { r.Callback = "" },
		func(r *jobqueue.NLMRequest) { r.Callback = "file:///etc/passwd" },
		func(r *jobqueue.NLMRequest) { r.ProjectID = "a b" },
		func(r *jobqueue.NLMRequest) { r.RunID = "r/1" },
	} {
		r := nlmRequest(cs, "job-v")
		mod(&r)
		if _, err := p.Accept(context.Background(), r); !errors.Is(err, jobqueue.ErrInvalidJob) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for k, err := range s.List(context.Background(), "") {
		t.Errorf("invalid requests wrote %s %v", k, err)
	}
}
