package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/otlp"
	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/internal/testkit/nlmsim"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// serviceName names the Worker's spans unless OTEL_SERVICE_NAME says
// otherwise.
const serviceName = "conveyor-worker"

// worker is one process's part of the Worker: the Client, and the HTTP
// API on ln when its role serves one.
type worker struct {
	opts      options
	stderr    io.Writer
	log       *slog.Logger
	where     string         // the store, for the log
	store     *storage.Store // the store it opened (not one a test gave), closed when it stops
	c         *conveyor.Client
	ln        net.Listener
	tokens    map[string]lifecycle.Actor
	endTraces func(context.Context) error // flushes the spans
}

// build opens the store, listens (the NLM callback URL needs the port of
// -addr :0), builds the Client from the flags and mounts the API on it.
func build(ctx context.Context, o options, stderr io.Writer) (_ *worker, err error) {
	w := &worker{opts: o, stderr: stderr, log: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))}
	defer func() {
		if err != nil {
			w.close(ctx)
		}
	}()
	cfg := conveyor.Config{Store: o.store, Clock: o.clock, Logger: w.log, Owner: o.owner, Retention: o.retention, Metrics: prometheus.NewRegistry(),
		SubmitOnly: o.role == roleAPI, JobWorker: conveyor.JobWorkerConfig{Slots: 4, PollInterval: o.idlePoll}}
	w.where = "the given store"
	if cfg.Store == nil {
		if cfg.Store, w.where, err = openStore(ctx, o, w.log); err != nil {
			return nil, err
		}
		w.store = cfg.Store
	}
	if cfg.TracerProvider, w.endTraces, err = otlp.FromEnv(ctx, serviceName); err != nil {
		return nil, err
	}
	if w.tokens, err = httpapi.LoadTokens(o.tokens); err != nil {
		return nil, err
	}
	if o.role != roleRunner && o.addr != "" {
		if err := w.listen(&o); err != nil {
			return nil, err
		}
	}
	conf, err := readConfig(o.config)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if o.allowUnsafeStore {
		cfg.StoreCheck = conveyor.StoreCheckWarn
	}
	clk, pause := cfg.Clock, o.pause
	// The NLM backend is simulated, and posts its callbacks to the API.
	cfg.Schedules, cfg.NLMStages, cfg.JobHandlers = conf.Schedules, nlmsim.Stages(clk, pause), nlmsim.Handlers(clk, pause)
	if !o.noDemo {
		cfg.NLMAgents = func(p *nlm.Processor) []run.Agent { return demoAgents(clk, pause, o.demoConc, p) }
	}
	cfg.Runner.PollInterval, cfg.Runner.ParkedPollInterval = o.idlePoll, 4*o.poll
	cfg.Runner.Concurrency = o.runConc
	cfg.Runner.LeaseDuration, cfg.Runner.HeartbeatInterval = o.lease, o.lease/3
	cfg.Queue.StopGrace, cfg.Queue.LeaseTTL = o.drain/3, min(o.lease, 30*time.Second)
	cfg.Queue.RollingUpgrade = o.rollingUpgrade
	cfg.NLM.PollInterval, cfg.NLM.CallbackURL, cfg.NLM.Client = o.idlePoll, o.callbackURL, nlmsim.Poster(w.tokens)
	if w.c, err = conveyor.New(cfg); err != nil {
		return nil, err
	}
	if w.ln == nil {
		return w, nil
	}
	// The API, its event stream, page and metrics, and the webhooks whose
	// secret is set.
	gh, sl := os.Getenv("CONVEYOR_GITHUB_SECRET"), os.Getenv("CONVEYOR_SLACK_SIGNING_SECRET")
	if gh == "" && sl == "" && len(conf.Webhooks) > 0 {
		return nil, fmt.Errorf("%s routes webhooks, but neither CONVEYOR_GITHUB_SECRET nor CONVEYOR_SLACK_SIGNING_SECRET is set", o.config)
	}
	// One registry: the Client registered Conveyor's metrics and the Go and
	// process collectors in it, the API adds its request metrics.
	metrics := promhttp.HandlerFor(cfg.Metrics.(*prometheus.Registry), promhttp.HandlerOpts{})
	return w, httpapi.Mount(w.c, w.ln, httpapi.Config{Tokens: w.tokens, Logger: w.log, Limits: o.limits, TracerProvider: cfg.TracerProvider,
		Events: true, EventPollInterval: o.poll, EventIdlePollInterval: 2 * o.idlePoll, EventWriteTimeout: o.streamWrite, Page: true,
		GitHubSecret: gh, SlackSigningSecret: sl, WebhookRoutes: conf.Webhooks, Metrics: metrics, Registerer: cfg.Metrics, Drain: o.drain})
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

// close releases what build took, when build or the start fails.
func (w *worker) close(ctx context.Context) {
	if w.ln != nil {
		_ = w.ln.Close()
	}
	if w.endTraces != nil {
		_ = w.endTraces(context.WithoutCancel(ctx))
	}
	w.closeStore()
}

// closeStore closes the store build opened (SQLite's connections and
// watch poller), once the Client has stopped using it.
func (w *worker) closeStore() {
	if w.store != nil {
		_ = w.store.Close()
	}
}

// openStore opens the store the flags name, and says which for the log.
func openStore(ctx context.Context, o options, log *slog.Logger) (*storage.Store, string, error) {
	if o.s3Bucket == "" {
		return storeopen.Embedded(ctx, o.storeKind, o.data)
	}
	// A Worker on a bucket it cannot use would say it serves and then fail
	// every call: it refuses to start instead, saying why, and waits for a
	// server that does not answer yet (started with the Worker, or
	// restarting) within 30 s.
	return storeopen.OpenS3(ctx, storeopen.S3{Bucket: o.s3Bucket, Prefix: o.s3Prefix, Endpoint: o.s3Endpoint,
		Settle: o.s3Settle, Log: log, CheckWait: 30 * time.Second})
}

// serve starts the Client (which first checks the store) and runs until
// ctx ends or a part fails, then stops within -drain and flushes the spans.
func (w *worker) serve(ctx context.Context, ready func(string)) error {
	if err := w.c.Start(ctx); err != nil {
		w.close(ctx)
		if errors.Is(err, conveyor.ErrUnsafeStore) {
			return fmt.Errorf("%s: the Worker refuses to start (-allow-unsafe-store starts anyway): %w", w.where, err)
		}
		return fmt.Errorf("%s: %w", w.where, err)
	}
	addr := ""
	if w.ln != nil {
		addr = w.ln.Addr().String()
	}
	w.log.Info("worker_started", "role", w.opts.role, "store", w.where, "addr", addr, "owner", w.c.Owner())
	if addr != "" {
		fmt.Fprintf(w.stderr, "conveyor worker (%s) on %s: API http://%s, live page http://%s/ui/\n", w.opts.role, w.where, addr, addr)
	}
	if ready != nil {
		ready(addr)
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-w.c.Failed():
		w.log.Error("worker_failed", "error", failed.Error())
	}
	w.log.Info("worker_draining", "grace", w.opts.drain.String())
	dctx, cancel := context.WithTimeout(context.Background(), w.opts.drain)
	defer cancel()
	if w.c.Stop(dctx) != nil {
		w.log.Error("worker_drain_timeout", "grace", w.opts.drain.String())
	}
	// The spans not yet exported go out now, within what is left of the
	// drain (otlp gives them at least a second).
	if err := w.endTraces(dctx); err != nil {
		w.log.Warn("traces_not_flushed", "error", err.Error())
	}
	w.closeStore()
	return failed
}
