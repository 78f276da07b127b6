package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Tokens of the rig's server, one per actor.
var tokens = map[string]lifecycle.Actor{
	"tok-gateway": lifecycle.ActorGateway, "tok-admin": lifecycle.ActorAdmin, "tok-frontend": lifecycle.ActorFrontend,
	"tok-nlm": lifecycle.ActorNLMBackend, "tok-orch": lifecycle.ActorOrchestration, "tok-system": lifecycle.ActorSystem,
}

// rig is a real Runner, Queue, Box and NLM processor on one memstore,
// behind a real server on 127.0.0.1.
type rig struct {
	t      *testing.T
	store  *storage.Store
	runner *run.Runner
	queue  *jobqueue.Queue
	box    *inbox.Box
	srv    *httptest.Server
	server *httpapi.Server
	// release lets the "slow" agent's step finish.
	release     chan struct{}
	releaseOnce sync.Once
	// inputs holds what the steps after a wait ("publish", "finish") were
	// given, by run id.
	inputs sync.Map
}

// releaseSteps lets the "slow" agent's steps finish.
func (g *rig) releaseSteps() { g.releaseOnce.Do(func() { close(g.release) }) }

type rigOpts struct {
	running bool // start the Runner's loop
	tokens  map[string]lifecycle.Actor
	events  http.Handler
	page    bool
	// requestTimeout is Config.RequestTimeout (0: the default).
	requestTimeout time.Duration
	// limits is Config.Limits.
	limits httpapi.Limits
	// served, when set, is called after the server answered each request.
	served func(*http.Request)
	// store is the store of it all (nil: a memstore).
	store *storage.Store
	// clock is the job queue's (nil: the real one).
	clock clock.Clock
	// queue, when set, changes the job queue's Config.
	queue func(*jobqueue.Config)
	// types is the job queue's Config.Types (nil: the NLM types alone).
	types map[lifecycle.JobType]jobqueue.TypeConfig
}

func quickStep(name string) run.Step {
	return run.Step{Name: name, Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: name + " done"}, nil
	}}
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	g := &rig{t: t, store: o.store, release: make(chan struct{})}
	if g.store == nil {
		g.store = memstore.New()
	}
	t.Cleanup(g.releaseSteps)
	slow := run.Step{Name: "work", Idempotent: true, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
		select {
		case <-g.release:
			return run.StepOutput{Summary: "released"}, nil
		case <-ctx.Done():
			return run.StepOutput{}, ctx.Err()
		}
	}}
	gate := run.Step{Name: "draft", Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "drafted", Await: &run.Await{Approval: "publish"}}, nil
	}}
	wait := run.Step{Name: "ask", Idempotent: true, Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
		return run.StepOutput{Summary: "asked", Await: &run.Await{ExternalEvent: "reply"}}, nil
	}}
	after := func(name string) run.Step {
		s := quickStep(name)
		s.Run = func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
			g.inputs.Store(in.RunID, in)
			return run.StepOutput{Summary: name + " done"}, nil
		}
		return s
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	g.runner, err = run.NewRunner(run.Config{Store: g.store, Owner: "test", Logger: log},
		run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load"), quickStep("write")}},
		run.Agent{Slug: "slow", Machine: lifecycle.MachineCancelable, Steps: []run.Step{slow}},
		run.Agent{Slug: "gate", Machine: lifecycle.MachineApproval, Steps: []run.Step{gate, after("publish")}},
		run.Agent{Slug: "ext", Machine: lifecycle.MachineApproval, Steps: []run.Step{wait, after("finish")}},
	)
	if err != nil {
		t.Fatal(err)
	}
	qc := jobqueue.Config{Store: g.store, Logger: log, Clock: o.clock, Types: o.types}
	if o.queue != nil {
		o.queue(&qc)
	}
	if g.queue, err = jobqueue.New(qc); err != nil {
		t.Fatal(err)
	}
	if g.box, err = inbox.New(inbox.Config{Store: g.store, Logger: log}); err != nil {
		t.Fatal(err)
	}
	proc, err := nlm.New(nlm.Config{Store: g.store, Owner: "nlm-test", Logger: log}, nlm.Stages{
		Query: func(context.Context, lifecycle.NLMRequest, string) (json.RawMessage, error) {
			return json.RawMessage(`{}`), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.tokens == nil {
		o.tokens = tokens
	}
	sched, err := schedule.New(schedule.Config{Runner: g.runner, Queue: g.queue, Store: g.store, Logger: log,
		Schedules: []schedule.Schedule{{ID: "nightly", Agent: "quick", Cron: "@daily"},
			{ID: "hourly-brief", Every: time.Hour, Job: &lifecycle.ScheduleJob{JobType: lifecycle.JobBrief, AgentSlug: "briefs", MaxAttempts: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.NewWithStream(httpapi.Config{Runner: g.runner, Queue: g.queue, Inbox: g.box, NLM: proc, Store: g.store,
		Schedules: sched.View(), Tokens: o.tokens, Page: o.page, Logger: log, RequestTimeout: o.requestTimeout, Limits: o.limits}, o.events)
	if err != nil {
		t.Fatal(err)
	}
	g.server = s
	var h http.Handler = s
	if o.served != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.ServeHTTP(w, r); o.served(r) })
	}
	g.srv = httptest.NewServer(h)
	t.Cleanup(g.srv.Close)
	if o.running {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.runner.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Runner.Run: %v", err)
			}
		})
	}
	return g
}

// client returns a Client acting with the token of actor.
func (g *rig) client(actor lifecycle.Actor) *client.Client {
	c := &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client()}
	for tok, a := range tokens {
		if a == actor {
			c.Token = tok
		}
	}
	return c
}

// snapshot reads every key and value of the store, audit log included.
func (g *rig) snapshot() map[string]string {
	g.t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	for key, err := range g.store.List(ctx, "") {
		if err != nil {
			g.t.Fatal(err)
		}
		b, _, err := g.store.Get(ctx, key)
		if err != nil {
			g.t.Fatal(err)
		}
		out[key] = string(b)
	}
	return out
}

func diffSnapshots(before, after map[string]string) string {
	var d []string
	for k, v := range after {
		if w, ok := before[k]; !ok {
			d = append(d, "+ "+k)
		} else if w != v {
			d = append(d, "~ "+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			d = append(d, "- "+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// raw sends a request as it is and returns the status, the headers and
// the body.
func (g *rig) raw(method, path, token, contentType string, body []byte, header map[string]string) (int, http.Header, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	hc := *g.srv.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// waitStatus waits (on the Runner, in real time: the steps are instant)
// until the run is terminal or parked.
func (g *rig) waitStatus(runID string) lifecycle.RunStatus {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(lifecycle.WithTenant(context.Background(), lifecycle.AllTenants), 10*time.Second)
	defer cancel()
	st, err := g.runner.Wait(ctx, runID)
	if err != nil {
		g.t.Fatalf("Wait %s: %v", runID, err)
	}
	return st
}

// apiError asserts err is an *client.Error with status and code.
func apiError(t *testing.T, err error, status int, code string) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *client.Error %d %s", err, err, status, code)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("error %d %s (%s), want %d %s", e.Status, e.Code, e.Message, status, code)
	}
	return e
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
