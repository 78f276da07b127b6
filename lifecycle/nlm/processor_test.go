package nlm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/storage"
)

// callbackServer is a real HTTP callback receiver: it records the
// callbacks and answers with the statuses in fail first, then 200.
type callbackServer struct {
	*httptest.Server
	mu   sync.Mutex
	got  []lifecycle.NLMCallbackBody
	fail []int
}

func newCallbackServer(t *testing.T, fail ...int) *callbackServer {
	cs := &callbackServer{fail: fail}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b lifecycle.NLMCallbackBody
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

func (cs *callbackServer) bodies() []lifecycle.NLMCallbackBody {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]lifecycle.NLMCallbackBody(nil), cs.got...)
}

// processorFor is a processor posting to cs over HTTP. Callback retries
// wait a nanosecond of the wall clock: nothing here waits on time.
func processorFor(t *testing.T, s *storage.Store, cs *callbackServer, failAt string) *nlm.Processor {
	return newProcessor(t, nlm.Config{Store: s, Client: cs.Client(), Clock: clock.Real(), Owner: "p1",
		CallbackBackoff: time.Nanosecond}, stagesFailingAt(failAt))
}

func TestProcessDone(t *testing.T) {
	t.Parallel()
	env.Each(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		p := processorFor(t, s, cs, "")
		req := request(cs.URL+"/jobs/job-n/result", "job-n")
		j, err := p.Accept(ctx, req)
		if err != nil || j.Status != lifecycle.NLMAccepted {
			t.Fatalf("accept %+v %v", j, err)
		}
		if again, err := p.Accept(ctx, req); err != nil || again.Status != lifecycle.NLMAccepted {
			t.Fatalf("second accept %+v %v", again, err)
		}
		j, err = p.Process(ctx, "job-n")
		if err != nil || j.Status != lifecycle.NLMDone || j.ArtifactID != artifact.IDForJob("job-n") || j.Lease != nil {
			t.Fatalf("process %+v %v", j, err)
		}
		if b := cs.bodies(); len(b) != 1 || b[0] != (lifecycle.NLMCallbackBody{JobID: "job-n", Status: "COMPLETE", ArtifactID: j.ArtifactID}) {
			t.Fatalf("callbacks %+v", b)
		}
		// Every move is audited, by the NLM backend, in pipeline order.
		var moves []string
		for ev, err := range records.ReadAuditDay(ctx, s, time.Now()) {
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
		// A processed job cannot run again, and it left the index of jobs
		// in flight.
		if _, err := p.Process(ctx, "job-n"); !errors.Is(err, lifecycle.ErrTerminalState) {
			t.Fatalf("reprocessing: %v", err)
		}
		for k, err := range s.List(ctx, "nlm/active/") {
			t.Fatalf("index entry %s %v left", k, err)
		}
	})
}

// TestProcessErrors: a failure at any stage ends in ERROR with a FAILED
// callback; a callback that cannot be delivered ends in ERROR too.
func TestProcessErrors(t *testing.T) {
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
		{"", []int{500, 503}, "", []string{"COMPLETE", "COMPLETE", "COMPLETE"}},                        // delivered on the third try
		{"", []int{500, 500, 500}, "CALLBACK", []string{"COMPLETE", "COMPLETE", "COMPLETE", "FAILED"}}, // never delivered
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s%v", tt.failAt, tt.fail), func(t *testing.T) {
			t.Parallel()
			cs := newCallbackServer(t, tt.fail...)
			s := memstore.New()
			p := processorFor(t, s, cs, tt.failAt)
			ctx := context.Background()
			if _, err := p.Accept(ctx, request(cs.URL+"/jobs/job-e/result", "job-e")); err != nil {
				t.Fatal(err)
			}
			j, err := p.Process(ctx, "job-e")
			if err != nil {
				t.Fatal(err)
			}
			want := lifecycle.NLMError
			if tt.wantFrom == "" {
				want = lifecycle.NLMDone
			}
			if j.Status != want || (want == lifecycle.NLMError && !strings.HasPrefix(j.Error, tt.wantFrom)) || j.Lease != nil {
				t.Errorf("ended %+v", j)
			}
			var statuses []string
			for _, b := range cs.bodies() {
				statuses = append(statuses, b.Status)
				if b.Status == "FAILED" && (b.Error == "" || b.ArtifactID != "") {
					t.Errorf("FAILED callback %+v", b)
				}
			}
			if strings.Join(statuses, ",") != strings.Join(tt.callback, ",") {
				t.Errorf("callbacks %v, want %v", statuses, tt.callback)
			}
			if tt.failAt != "" && tt.failAt != "structure" {
				// No artifact for a job that failed before structuring.
				for k, err := range s.List(ctx, "projects/") {
					t.Errorf("artifact %s %v", k, err)
				}
			}
		})
	}
}

func TestAcceptValidation(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	p := newProcessor(t, nlm.Config{Store: s, Clock: clock.NewFake(t0)}, stagesFailingAt(""))
	for _, mod := range []func(*lifecycle.NLMRequest){
		func(r *lifecycle.NLMRequest) { r.JobID = "../x" },
		func(r *lifecycle.NLMRequest) { r.AgentSlug = "" },
		func(r *lifecycle.NLMRequest) { r.JobType = "X" },
		func(r *lifecycle.NLMRequest) { r.Callback = "" },
		func(r *lifecycle.NLMRequest) { r.Callback = "file:///etc/passwd" },
		func(r *lifecycle.NLMRequest) { r.ProjectID = "a b" },
		func(r *lifecycle.NLMRequest) { r.RunID = "r/1" },
	} {
		r := request("https://example.com/cb", "job-v")
		mod(&r)
		if _, err := p.Accept(context.Background(), r); !errors.Is(err, lifecycle.ErrInvalidJob) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for k, err := range s.List(context.Background(), "") {
		t.Errorf("invalid requests wrote %s %v", k, err)
	}
}

// TestAcceptRefusesBadText: Accept checks the text of a request as the
// queue's Enqueue does, and writes nothing for a bad one (issue 10 F).
func TestAcceptRefusesBadText(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	p := newProcessor(t, nlm.Config{Store: s, Clock: clock.NewFake(t0)}, stagesFailingAt(""))
	ctx := context.Background()
	req := request("https://example.com/cb", "job-0")
	if _, err := p.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	inputs := []struct {
		field string
		limit int
		set   func(r *lifecycle.NLMRequest, v string)
	}{
		{"query", codes.MaxDocumentBytes, func(r *lifecycle.NLMRequest, v string) { r.Query = v }},
		{"callback", codes.MaxURLBytes, func(r *lifecycle.NLMRequest, v string) { r.Callback = "https://example.com/" + v }},
		{"context_snapshot_url", codes.MaxURLBytes, func(r *lifecycle.NLMRequest, v string) { r.ContextSnapshotURL = "s3://b/" + v }},
	}
	for i, in := range inputs {
		bad := []struct{ name, value, code string }{
			{"oversized", strings.Repeat("x", in.limit+1), codes.InputTooLarge},
			{"invalid UTF-8", "ok\xff\xfe", codes.InvalidInput},
			{"NUL", "ok\x00ok", codes.InvalidInput},
		}
		for j, bv := range bad {
			t.Run(in.field+"/"+bv.name, func(t *testing.T) {
				r := req
				r.JobID = fmt.Sprintf("job-%d-%d", i, j)
				in.set(&r, bv.value)
				before := teststores.Snapshot(t, s)
				_, err := p.Accept(ctx, r)
				var ie *lifecycle.InputError
				if !errors.Is(err, lifecycle.ErrInvalidJob) || lifecycle.ErrorCode(err) != bv.code || !errors.As(err, &ie) || ie.Field != in.field {
					t.Errorf("Accept = %.300v, want ErrInvalidJob with %s for %s", err, bv.code, in.field)
				}
				if len(fmt.Sprint(err)) > 400 {
					t.Errorf("message of %d bytes: the value leaked into it", len(fmt.Sprint(err)))
				}
				teststores.Unchanged(t, s, before)
			})
		}
	}
}
