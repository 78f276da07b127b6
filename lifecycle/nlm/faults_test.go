package nlm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// hanging returns stages that succeed, except the one named hang, which
// tells entered and then ignores its context until release is closed.
func hanging(hang string, entered chan<- struct{}, release <-chan struct{}) nlm.Stages {
	s := stagesFailingAt("")
	block := func() {
		entered <- struct{}{}
		<-release
	}
	switch hang {
	case "fetch":
		s.FetchContext = func(context.Context, lifecycle.NLMRequest) (json.RawMessage, error) { block(); return nil, nil }
	case "prompt":
		s.BuildPrompt = func(context.Context, lifecycle.NLMRequest, json.RawMessage) (string, error) { block(); return "p", nil }
	case "query":
		s.Query = func(context.Context, lifecycle.NLMRequest, string) (json.RawMessage, error) { block(); return nil, nil }
	case "structure":
		s.Structure = func(context.Context, lifecycle.NLMRequest, json.RawMessage) (lifecycle.JobOutput, error) {
			block()
			return lifecycle.JobOutput{}, nil
		}
	}
	return s
}

// blockingPoster hangs every COMPLETE callback, ignoring its context, and
// answers FAILED ones.
type blockingPoster struct {
	*poster
	entered chan<- struct{}
	release <-chan struct{}
}

func (b blockingPoster) Do(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	if strings.Contains(string(body), `"COMPLETE"`) {
		b.entered <- struct{}{}
		<-b.release
	}
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	return b.poster.Do(req)
}

// TestFaultStageIgnoresItsContext: a stage whose code ignores its ctx is
// abandoned at its deadline, counted in Stragglers, the job takes the
// ERROR edge with the FAILED callback, and the processor's shutdown
// returns within its grace although the goroutine still runs.
func TestFaultStageIgnoresItsContext(t *testing.T) {
	t.Parallel()
	const grace = 100 * time.Millisecond
	tests := []struct {
		stage string
		state lifecycle.NLMState
		limit time.Duration
	}{
		{"fetch", lifecycle.NLMFetchingContext, 30 * time.Second},
		{"prompt", lifecycle.NLMBuildingPrompt, 10 * time.Second},
		{"query", lifecycle.NLMQuery, 60 * time.Second},
		{"structure", lifecycle.NLMStructuring, 30 * time.Second},
		{"callback", lifecycle.NLMCallback, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.stage, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			entered, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			post := newPoster(nil)
			cfg := nlm.Config{Store: memstore.New(), Clock: clk, Owner: "p1", Client: post, StopGrace: grace, CallbackAttempts: 1}
			if tt.stage == "callback" {
				cfg.Client = blockingPoster{poster: post, entered: entered, release: release}
			}
			p := newProcessor(t, cfg, hanging(tt.stage, entered, release))
			stop := runProcessor(t, p, grace+5*time.Second)
			if _, err := p.Accept(context.Background(), request("https://cb.example/r", "job-h")); err != nil {
				t.Fatal(err)
			}
			<-entered // the stage runs, and its deadline is armed
			clk.Advance(tt.limit)
			cb := post.next(t)
			if cb.Status != "FAILED" || !strings.HasPrefix(cb.Error, string(tt.state)+": ") || !strings.Contains(cb.Error, "exceeded its") {
				t.Fatalf("callback %+v, want FAILED at %s for the overrun", cb, tt.state)
			}
			j, err := p.Get(context.Background(), "job-h")
			if err != nil || j.Status != lifecycle.NLMError || j.Error != cb.Error || j.Lease != nil {
				t.Fatalf("job %+v %v, want ERROR without a lease", j, err)
			}
			if live, total := p.Stragglers(); live != 1 || total != 1 {
				t.Fatalf("Stragglers = %d, %d; want the hung stage, 1 of 1", live, total)
			}
			if took := stop(); took > grace+2*time.Second {
				t.Fatalf("shutdown took %v with a hung stage, grace %v", took, grace)
			}
		})
	}
}

// TestFaultShutdownHandsBack: a processor stopped while a stage hangs
// returns within its grace and hands the job's lease back; another
// processor takes the job at once (no takeover counted) and finishes it.
func TestFaultShutdownHandsBack(t *testing.T) {
	t.Parallel()
	const grace = 100 * time.Millisecond
	clk := clock.NewFake(t0)
	s := watch(memstore.New())
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	p1 := newProcessor(t, nlm.Config{Store: storage.New(s), Clock: clk, Owner: "p1", Client: newPoster(nil), StopGrace: grace},
		hanging("query", entered, release))
	stop := runProcessor(t, p1, grace+5*time.Second)
	if _, err := p1.Accept(context.Background(), request("https://cb.example/r", "job-s")); err != nil {
		t.Fatal(err)
	}
	<-entered
	if took := stop(); took > grace+2*time.Second {
		t.Fatalf("shutdown took %v with a hung stage, grace %v", took, grace)
	}
	j, err := p1.Get(context.Background(), "job-s")
	if err != nil || j.Status != lifecycle.NLMQuery || j.Lease == nil || j.Lease.Owner != "" || j.Lease.Epoch != 1 {
		t.Fatalf("after shutdown: %+v %v; want NLM_QUERY with the lease handed back", j, err)
	}
	post := newPoster(nil)
	p2 := newProcessor(t, nlm.Config{Store: storage.New(s), Clock: clk, Owner: "p2", Client: post}, stagesFailingAt(""))
	j, err = p2.Process(context.Background(), "job-s")
	if err != nil || j.Status != lifecycle.NLMDone || j.Takeovers != 0 {
		t.Fatalf("second processor: %+v %v; want DONE, no takeover counted", j, err)
	}
	if cb := post.all(); len(cb) != 1 || cb[0].Status != "COMPLETE" {
		t.Fatalf("callbacks %+v", cb)
	}
}

// freezer is a processor's view of the store that can be frozen like a
// SIGSTOPped process: its calls block until thawed.
type freezer struct {
	driver.Store
	mu     sync.Mutex
	thawed chan struct{} // nil while running
}

func (f *freezer) freeze() { f.mu.Lock(); f.thawed = make(chan struct{}); f.mu.Unlock() }
func (f *freezer) thaw()   { f.mu.Lock(); close(f.thawed); f.thawed = nil; f.mu.Unlock() }
func (f *freezer) wait() {
	f.mu.Lock()
	ch := f.thawed
	f.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (f *freezer) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	f.wait()
	return f.Store.Get(ctx, key)
}

func (f *freezer) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	f.wait()
	return f.Store.Put(ctx, key, v, c)
}

// TestFaultPausedProcessorIsFenced: a processor paused past its lease
// (its store calls frozen, its heartbeat stuck) wakes up after another
// took the job over (epoch 2) and finished it: none of its writes land,
// it gets lifecycle.ErrLeaseLost, and no second callback is posted.
func TestFaultPausedProcessorIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	shared := memstore.New()
	frozen := &freezer{Store: shared}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	post := newPoster(nil)
	cfg := nlm.Config{Store: storage.New(frozen), Clock: clk, Owner: "a", Client: post, LeaseTTL: 90 * time.Second, QueryTimeout: time.Hour}
	a := newProcessor(t, cfg, hanging("query", entered, release))
	if _, err := a.Accept(ctx, request("https://cb.example/r", "job-p")); err != nil {
		t.Fatal(err)
	}
	type result struct {
		job lifecycle.NLMJob
		err error
	}
	done := make(chan result, 1)
	go func() {
		j, err := a.Process(ctx, "job-p")
		done <- result{j, err}
	}()
	<-entered       // a is in NLM_QUERY at epoch 1
	frozen.freeze() // and now paused: its heartbeat cannot renew
	clk.Advance(100 * time.Second)

	cfg.Store, cfg.Owner = shared, "b"
	b := newProcessor(t, cfg, stagesFailingAt(""))
	j, err := b.Process(ctx, "job-p")
	if err != nil || j.Status != lifecycle.NLMDone || j.Takeovers != 1 {
		t.Fatalf("takeover: %+v %v; want DONE after one takeover", j, err)
	}
	before, _, _ := shared.Get(ctx, "nlm/jobs/job-p.json")
	frozen.thaw()
	close(release) // a's stage returns too, as a woken process would
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the paused processor never returned")
	}
	var lost *lifecycle.LeaseLostError
	if !errors.Is(res.err, lifecycle.ErrLeaseLost) || !errors.As(res.err, &lost) || lost.Owner != "a" || lost.Epoch != 1 {
		t.Fatalf("paused processor: %+v %v; want a LeaseLostError of a at epoch 1", res.job, res.err)
	}
	after, _, _ := shared.Get(ctx, "nlm/jobs/job-p.json")
	if string(after) != string(before) {
		t.Fatalf("a late write landed:\n%s\nthen\n%s", before, after)
	}
	if cb := post.all(); len(cb) != 1 || cb[0].Status != "COMPLETE" {
		t.Fatalf("callbacks %+v, want b's one COMPLETE", cb)
	}
}

// TestFaultPoisonRecord: a corrupt NLM record is quarantined, with its
// bytes and reason, and the processor goes on with the other jobs.
func TestFaultPoisonRecord(t *testing.T) {
	t.Parallel()
	good := func(id string) string {
		b, _ := json.Marshal(map[string]any{"job_id": id, "status": "ACCEPTED", "request": request("https://cb.example/r", id)})
		return string(b)
	}
	tests := []struct {
		name, body, reason string
	}{
		{"garbage", "{not json", "cannot decode"},
		{"wrong type", `{"job_id": 7}`, "cannot decode"},
		{"unknown status", strings.Replace(good("job-bad"), "ACCEPTED", "SIDEWAYS", 1), "invalid"},
		{"another job's record", good("job-other"), "invalid"},
		{"no request", `{"job_id":"job-bad","status":"NLM_QUERY"}`, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			s := watch(memstore.New())
			// Both jobs were accepted elsewhere: this processor finds them
			// by polling the jobs in flight, the poison one first.
			for _, kv := range [][2]string{
				{"nlm/jobs/job-bad.json", tt.body}, {"nlm/active/job-bad", `{}`},
				{"nlm/jobs/job-good.json", good("job-good")}, {"nlm/active/job-good", `{}`},
			} {
				if _, err := s.Put(ctx, kv[0], []byte(kv[1]), storage.IfNotExists()); err != nil {
					t.Fatal(err)
				}
			}
			post := newPoster(nil)
			p := newProcessor(t, nlm.Config{Store: storage.New(s), Clock: clk, Owner: "p1", Client: post}, stagesFailingAt(""))
			runProcessor(t, p, 5*time.Second)
			s.until(t, "job-good DONE", jobIs(p, "job-good", lifecycle.NLMDone))
			var qs []records.Quarantined
			for q, err := range records.ListQuarantine(ctx, storage.New(s)) {
				if err != nil {
					t.Fatal(err)
				}
				qs = append(qs, q)
			}
			if len(qs) != 1 || qs[0].Key != "nlm/jobs/job-bad.json" || string(qs[0].Data) != tt.body || !strings.HasPrefix(qs[0].Reason, tt.reason) {
				t.Fatalf("quarantine %+v", qs)
			}
			if p.Quarantined() != 1 {
				t.Fatalf("Quarantined = %d", p.Quarantined())
			}
			for _, k := range []string{"nlm/jobs/job-bad.json", "nlm/active/job-bad"} {
				if _, _, err := s.Get(ctx, k); !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("%s still there: %v", k, err)
				}
			}
			if _, err := p.Get(ctx, "job-bad"); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("Get of the quarantined job: %v", err)
			}
		})
	}
}
