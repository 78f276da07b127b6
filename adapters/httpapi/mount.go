package httpapi

import (
	"context"
	"net"
	"time"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Parts are what Mount serves and where it runs its loops: the Client of
// the root package (conveyor.Client) is one.
type Parts interface {
	Runs() *run.Runner
	Jobs() *jobqueue.Queue
	Inbox() *inbox.Box
	NLM() *nlm.Processor
	Schedules() lifecycle.Schedules
	Store() *storage.Store
	Clock() clock.Clock
	// Add adds a loop that runs until its context ends, started after the
	// engines and stopped before them.
	Add(name string, run func(ctx context.Context) error) error
}

// Mount serves the HTTP API over p on ln: a Server of cfg, its engines,
// Store and Clock set from p, served by an http.Server with cfg.Limits
// applied to it and to ln (Limits.HTTPServer, Limits.Listener). It adds two
// loops to p: the http.Server, then the Server's Run (the event feed),
// which so stops first: its end ends the event streams Shutdown would wait
// for. Once its loop ends, the http.Server's Shutdown waits up to
// cfg.Drain for the requests in flight, then closes them; ln is closed
// with it. A Server without Tokens logs a warning (no_tokens) when its
// loop starts. An error matches ErrInvalidConfig, or is Add's.
func Mount(p Parts, ln net.Listener, cfg Config) error {
	cfg.Runner, cfg.Queue, cfg.Inbox, cfg.NLM, cfg.Schedules = p.Runs(), p.Jobs(), p.Inbox(), p.NLM(), p.Schedules()
	cfg.Store, cfg.Clock = p.Store(), p.Clock()
	api, err := New(cfg)
	if err != nil {
		return err
	}
	log, drain := api.log, cfg.Drain
	if drain <= 0 {
		drain = defaultDrain
	}
	// The server's limits (headers, idle keep-alives, header bytes,
	// connections per address; the Server bounds bodies) keep any one
	// client from holding the process's descriptors.
	srv, lln := cfg.Limits.HTTPServer(api), cfg.Limits.Listener(ln)
	if err := p.Add("http", func(ctx context.Context) error {
		if len(cfg.Tokens) == 0 {
			log.Warn("no_tokens", "msg_detail", "no bearer tokens configured: serving loopback only; every request acts as its X-Conveyor-Actor header, gateway by default")
		}
		errs := make(chan error, 1)
		go func() { errs <- srv.Serve(lln) }()
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
		return nil
	}); err != nil {
		return err
	}
	return p.Add("events", api.Run)
}

// defaultDrain is Config.Drain's default.
const defaultDrain = 15 * time.Second
