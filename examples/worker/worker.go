package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/httpapi/events"
	"github.com/runconveyor/conveyor/adapters/httpapi/page"
	"github.com/runconveyor/conveyor/adapters/httpapi/webhook"
	promadapter "github.com/runconveyor/conveyor/adapters/prometheus"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/retention"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/lifecycle/run/schedule"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/probe"
)

// worker is one process's part of the Worker: what its role runs.
type worker struct {
	opts   options
	stderr io.Writer
	log    *slog.Logger
	store  *storage.Store
	clock  clock.Clock
	where  string
	runner *run.Runner
	queue  *jobqueue.Queue
	jobs   *jobqueue.Worker
	sched  *schedule.Scheduler
	nlm    *nlm.Processor
	box    *inbox.Box
	jan    *retention.Janitor
	feed   *events.Feed
	http   http.Handler
	ln     net.Listener
	tokens map[string]lifecycle.Actor
	// tracer receives the spans (nil: none); endTraces flushes them.
	tracer    trace.TracerProvider
	endTraces func(context.Context) error
}

// build wires the parts of one process in dependency order (store, NLM
// processor, runner, scheduler, queue, inbox, then the API). It stays one
// function of about 80 lines: each step needs the ones before it, and the
// deferred close of the listener covers every failure after listen.
func build(ctx context.Context, o options, stderr io.Writer) (_ *worker, err error) {
	w := &worker{opts: o, stderr: stderr, log: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))}
	defer func() {
		if err != nil && w.ln != nil {
			_ = w.ln.Close()
		}
		if err != nil && w.endTraces != nil {
			_ = w.endTraces(context.WithoutCancel(ctx))
		}
	}()
	if o.store != nil {
		w.store, w.where = o.store, "the given store"
	} else if w.store, w.where, err = openStore(ctx, o, w.log); err != nil {
		return nil, err
	}
	if err := w.checkStore(ctx); err != nil {
		return nil, err
	}
	if w.tracer, w.endTraces, err = tracerProvider(ctx); err != nil {
		return nil, err
	}
	clk := o.clock
	if clk == nil {
		clk = clock.Real()
	}
	w.clock = clk
	host, _ := os.Hostname()
	owner := o.owner
	if owner == "" {
		owner = run.DefaultOwner()
	}
	// The processor and the job worker take ids without "/", which
	// DefaultOwner's host/executable has.
	id := strings.ReplaceAll(owner, "/", ":")
	reg := prometheus.NewRegistry()
	metrics, err := promadapter.New(reg)
	if err != nil {
		return nil, err
	}

	if w.tokens, err = loadTokens(o.tokens); err != nil {
		return nil, err
	}
	serving := o.role != roleRunner && o.addr != ""
	if serving {
		// Listen first: with -addr :0 the callback URL needs the port.
		if err := w.listen(&o); err != nil {
			return nil, err
		}
	}
	w.nlm, err = nlm.New(nlm.Config{Store: w.store, Owner: id, CallbackURL: o.callbackURL, Client: callbackPoster(w.tokens), Clock: clk, Node: host,
		Logger: w.log, PollInterval: o.idlePoll}, nlmSimulator(clk, o.pause))
	if err != nil {
		return nil, err
	}
	var agents []run.Agent
	if !o.noDemo {
		agents = demoAgents(clk, o.pause, w.nlm)
		for i := range agents {
			agents[i].Concurrency = o.demoConc
		}
	}
	w.runner, err = run.NewRunner(run.Config{Store: w.store, Owner: owner, Clock: clk, Logger: w.log, Node: host,
		Metrics: metrics, PollInterval: o.idlePoll, ParkedPollInterval: 4 * o.poll,
		LeaseDuration: o.lease, HeartbeatInterval: o.lease / 3, TracerProvider: w.tracer}, agents...)
	if err != nil {
		return nil, err
	}
	conf, err := readConfig(o.config)
	if err != nil {
		return nil, err
	}
	schedules, err := conf.schedules()
	if err != nil {
		return nil, err
	}
	// Every process may run the scheduler: each slot starts one run
	// however many do. The API process lists and pauses them.
	w.sched, err = schedule.New(schedule.Config{Runner: w.runner, Store: w.store, Clock: clk, Logger: w.log,
		Metrics: metrics, Schedules: schedules})
	if err != nil {
		return nil, err
	}
	w.queue, err = jobqueue.New(jobqueue.Config{Store: w.store, Clock: clk, Node: host, Logger: w.log, StopGrace: o.drain / 3,
		LeaseTTL: min(o.lease, 30*time.Second), Metrics: metrics, TracerProvider: w.tracer})
	if err != nil {
		return nil, err
	}
	metrics.WatchQueue(w.queue)
	metrics.WatchRuns(w.runner) // gwi_run_active_gauge from the store
	w.jobs = &jobqueue.Worker{Queue: w.queue, ID: id, Slots: 4, Handlers: jobHandlers(clk, o.pause), PollInterval: o.idlePoll}
	w.box, err = inbox.New(inbox.Config{Store: w.store, Clock: clk, Node: host})
	if err != nil {
		return nil, err
	}
	// A janitor on every process, whatever its role: one of them makes
	// each pass (retention is off unless -retention or -retention-ages).
	rc := o.retention
	rc.Store, rc.Owner, rc.Clock, rc.Logger, rc.Metrics = w.store, id, clk, w.log, metrics
	if w.jan, err = retention.New(rc); err != nil {
		return nil, err
	}
	if !serving {
		return w, nil
	}
	if err := w.buildAPI(o, conf, clk, reg); err != nil {
		return nil, err
	}
	return w, nil
}

// listen opens the API's listener and, unless set, derives the NLM
// callback URL from its address.
func (w *worker) listen(o *options) (err error) {
	if err := httpapi.CheckListen(o.addr, w.tokens); err != nil {
		return err
	}
	if w.ln, err = net.Listen("tcp", o.addr); err != nil {
		return err
	}
	if o.callbackURL == "" {
		o.callbackURL = "http://" + w.ln.Addr().String() + "/nlm/callback"
	}
	return nil
}

// buildAPI builds what a serving process adds: the event feed, the
// webhooks whose secret is set and the HTTP API.
func (w *worker) buildAPI(o options, conf fileConfig, clk clock.Clock, reg *prometheus.Registry) (err error) {
	w.feed, err = events.New(events.Config{Store: w.store, Clock: clk, Logger: w.log, PollInterval: o.poll, IdlePollInterval: 2 * o.idlePoll,
		WriteTimeout: o.streamWrite})
	if err != nil {
		return err
	}
	// Webhooks are served for the sources whose secret is set.
	var hooks http.Handler
	gh, sl := os.Getenv("CONVEYOR_GITHUB_SECRET"), os.Getenv("CONVEYOR_SLACK_SIGNING_SECRET")
	if gh != "" || sl != "" {
		if hooks, err = webhook.New(webhook.Config{Runner: w.runner, Store: w.store, GitHubSecret: gh, SlackSigningSecret: sl,
			Routes: conf.routes(), Clock: clk, Logger: w.log}); err != nil {
			return err
		}
	} else if len(conf.Webhooks) > 0 {
		return fmt.Errorf("%s routes webhooks, but neither CONVEYOR_GITHUB_SECRET nor CONVEYOR_SLACK_SIGNING_SECRET is set", o.config)
	}
	w.http, err = httpapi.New(httpapi.Config{
		Runner: w.runner, Queue: w.queue, Inbox: w.box, NLM: w.nlm, Store: w.store, Schedules: w.sched,
		Tokens: w.tokens, Logger: w.log, Clock: clk, Limits: o.limits, TracerProvider: w.tracer,
		Events: w.feed, Page: page.Handler(), Webhooks: hooks, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	})
	if err != nil {
		return err
	}
	return nil
}

// callbackPoster posts the NLM simulator's callbacks as the nlm-backend
// actor, the only one the API lets post them: with that actor's token when
// the token file has one, else naming it in the header a Worker without
// tokens reads.
func callbackPoster(tokens map[string]lifecycle.Actor) nlm.Poster {
	var token string
	for t, a := range tokens {
		if a == lifecycle.ActorNLMBackend && (token == "" || t < token) {
			token = t
		}
	}
	return posterFunc(func(req *http.Request) (*http.Response, error) {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		} else {
			req.Header.Set(client.ActorHeader, string(lifecycle.ActorNLMBackend))
		}
		return http.DefaultClient.Do(req)
	})
}

type posterFunc func(*http.Request) (*http.Response, error)

func (f posterFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }

// loadTokens reads -tokens and CONVEYOR_TOKENS; none means loopback only.
func loadTokens(path string) (map[string]lifecycle.Actor, error) {
	tokens := map[string]lifecycle.Actor{}
	if path != "" {
		t, err := httpapi.LoadTokens(path)
		if err != nil {
			return nil, err
		}
		for k, v := range t {
			tokens[k] = v
		}
	}
	if env := os.Getenv("CONVEYOR_TOKENS"); env != "" {
		t, err := httpapi.ParseTokens(env)
		if err != nil {
			return nil, fmt.Errorf("CONVEYOR_TOKENS: %w", err)
		}
		for k, v := range t {
			tokens[k] = v
		}
	}
	return tokens, nil
}

func openStore(ctx context.Context, o options, log *slog.Logger) (*storage.Store, string, error) {
	if o.s3Bucket == "" {
		s, err := filestore.New(o.data)
		if err != nil {
			return nil, "", err
		}
		return s, "filestore " + o.data, nil
	}
	cfg, err := s3store.ConfigFromEnv()
	if err != nil && os.Getenv(s3store.EnvBucket) != "" {
		return nil, "", err
	}
	cfg.Bucket, cfg.Prefix = o.s3Bucket, o.s3Prefix
	if o.s3Endpoint != "" {
		cfg.Endpoint, cfg.Endpoints, cfg.UsePathStyle = o.s3Endpoint, nil, true
	}
	cfg.Settle, cfg.Logger = o.s3Settle, log
	if cfg.Endpoint == "" && (os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != "") {
		cfg.UsePathStyle = true
	}
	s, err := s3store.NewDriver(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	// A Worker on a bucket it cannot use would say it serves and then fail
	// every call: refuse to start instead, saying why. A server that does
	// not answer yet (started with the Worker, or restarting) is waited
	// for, within the same 30 s.
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := checkStore(checkCtx, s); err != nil {
		return nil, "", err
	}
	where := "s3 bucket " + cfg.Bucket
	if d := s.Settle(); d > 0 {
		where += fmt.Sprintf(" (a cluster: settles within %s)", d)
	}
	return storage.New(s), where, nil
}

// checkStore runs the store's start-up check until it passes, fails for
// a reason other than an unreachable server, or ctx ends.
func checkStore(ctx context.Context, s *s3store.Driver) error {
	for {
		err := s.Check(ctx)
		if err == nil || !errors.Is(err, s3store.ErrUnreachable) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// checkStore runs the start-up semantics probe on the store (a few
// requests under a folder of its own, removed afterwards): a store that
// breaks a promise the engines rest on refuses to start, naming the failed
// checks, unless -allow-unsafe-store, which logs them and starts.
func (w *worker) checkStore(ctx context.Context) error {
	start := time.Now()
	err := probe.Run(ctx, w.store, probe.Config{})
	switch {
	case err == nil:
		w.log.Info("store_checked", "store", w.where, "took_ms", time.Since(start).Milliseconds())
		return nil
	case errors.Is(err, probe.ErrFailed) && w.opts.allowUnsafeStore:
		w.log.Warn("store_semantics_failed", "store", w.where, "error", err.Error(),
			"msg_detail", "starting anyway (-allow-unsafe-store): duplicate submits may start two runs, a job may run twice")
		return nil
	case errors.Is(err, probe.ErrFailed):
		return fmt.Errorf("%s does not keep the promises the Worker rests on, so it refuses to start "+
			"(-allow-unsafe-store starts anyway; docs/stores.md):\n%w", w.where, err)
	}
	return fmt.Errorf("%s: %w", w.where, err)
}

// serve runs the role's parts until ctx ends, then drains them within
// -drain. It stays one function (about 80 lines): the start,
// the wait and the drain share the WaitGroup, the error channel and the
// order of the shutdown (feed, server, loops), which reads best in one place.
func (w *worker) serve(ctx context.Context, ready func(string)) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if w.opts.role != roleAPI {
		start("runner", w.runner.Run)
		start("jobs", w.jobs.Run)
		start("nlm", w.nlm.Run)
		start("inbox expiry", w.expireInbox)
		start("scheduler", w.sched.Run)
	}
	start("retention", w.jan.Run)
	var srv *http.Server
	stopFeed := func() {}
	addr := ""
	if w.http != nil {
		ln := w.ln
		addr = ln.Addr().String()
		// The feed stops first at shutdown: its end ends the event
		// streams, which Shutdown would otherwise wait for.
		var feedCtx context.Context
		feedCtx, stopFeed = context.WithCancel(runCtx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.feed.Run(feedCtx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("events: %w", err)
			}
		}()
		// The server's limits (headers, idle keep-alives, header bytes,
		// connections per address; the Server itself bounds bodies) keep
		// any one client from holding the process's descriptors.
		srv = w.opts.limits.HTTPServer(w.http)
		go func() {
			if err := srv.Serve(w.opts.limits.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("http: %w", err)
			}
		}()
		if len(w.tokens) == 0 {
			w.log.Warn("no_tokens", "msg_detail", "no bearer tokens configured: serving loopback only; every request acts as its X-Conveyor-Actor header, gateway by default")
		}
	}
	w.log.Info("worker_started", "role", w.opts.role, "store", w.where, "addr", addr, "owner", w.runner.Owner())
	if addr != "" {
		fmt.Fprintf(w.stderr, "conveyor worker (%s) on %s: API http://%s, live page http://%s/ui/\n", w.opts.role, w.where, addr, addr)
	}
	if ready != nil {
		ready(addr)
	}

	var failed error
	select {
	case <-ctx.Done():
	case failed = <-errs:
		w.log.Error("worker_failed", "error", failed.Error())
	}
	w.log.Info("worker_draining", "grace", w.opts.drain.String())
	deadline := time.Now().Add(w.opts.drain)
	stopFeed()
	if srv != nil {
		sctx, cancel := context.WithDeadline(context.Background(), deadline)
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		cancel()
	}
	stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		w.log.Error("worker_drain_timeout", "grace", w.opts.drain.String())
	}
	// The spans not yet exported go out now, within what is left of the
	// drain (at least a second, so a drain spent waiting still flushes).
	tctx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(time.Second)))
	defer cancel()
	if err := w.endTraces(tctx); err != nil {
		w.log.Warn("traces_not_flushed", "error", err.Error())
	}
	return failed
}

// expireInbox moves inbox entries past their TTL to inbox/expired/ once
// a minute (docs/spec.md#inbox-entry-lifecycle).
func (w *worker) expireInbox(ctx context.Context) error {
	// Counted as work on the clock but while it waits (clock.Activity).
	ctx, end := clock.Enter(ctx, w.clock)
	defer end()
	for {
		if _, err := w.box.ExpireDue(ctx, lifecycle.ActorSystem); err != nil && ctx.Err() == nil {
			w.log.Warn("inbox_expiry_failed", "error", err.Error())
		}
		if clock.Sleep(ctx, w.clock, time.Minute) != nil {
			return nil
		}
	}
}
