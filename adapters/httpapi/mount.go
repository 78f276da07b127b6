package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/events"
	"github.com/runconveyor/conveyor/adapters/httpapi/page"
	"github.com/runconveyor/conveyor/adapters/httpapi/webhook"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/lifecycle/run/schedule"
	"github.com/runconveyor/conveyor/storage"
)

// Parts are what Mount serves and where it runs its loops: the Client of
// the root package (conveyor.Client) is one.
type Parts interface {
	Runs() *run.Runner
	Jobs() *jobqueue.Queue
	Inbox() *inbox.Box
	NLM() *nlm.Processor
	Schedules() *schedule.Scheduler
	Store() *storage.Store
	Clock() clock.Clock
	// Add adds a loop that runs until its context ends, started after the
	// engines and stopped before them.
	Add(name string, run func(ctx context.Context) error) error
}

// MountConfig is a Server's Config and what Mount serves beyond it. Mount
// sets the Config's engines, Store and Clock from the Parts, and its
// Events, Page and Webhooks.
type MountConfig struct {
	Config
	// EventPollInterval is how often the event stream lists the store's
	// audit log; EventIdlePollInterval the longest gap between listings of
	// a store that cannot watch while nothing is new; EventWriteTimeout
	// bounds one write to a stream's client. Defaults 250 ms, 5 s, 30 s.
	EventPollInterval, EventIdlePollInterval, EventWriteTimeout time.Duration
	// GitHubSecret and SlackSigningSecret authenticate the webhooks of
	// their sources; a source without one is not served.
	GitHubSecret, SlackSigningSecret string
	// WebhookRoutes map the sources' events to agents; routes without
	// either secret are an error.
	WebhookRoutes []webhook.Route
	// Drain is how long the server's Shutdown waits for the requests in
	// flight once its loop ends, before it closes them. Default 15 s.
	Drain time.Duration
}

// Mount serves the HTTP API, with its event stream, live page and
// webhooks, over p on ln, with cfg.Limits applied to the listener
// and the http.Server. It adds two loops to p: the server, then the event
// feed, which so stops first: its end ends the event streams Shutdown
// would wait for. ln is closed when the server's loop ends. A server
// without Tokens logs a warning (no_tokens) when it starts. An error
// matches ErrInvalidConfig, or is Add's.
func Mount(p Parts, ln net.Listener, cfg MountConfig) error {
	sc := cfg.Config
	sc.Runner, sc.Queue, sc.Inbox, sc.NLM, sc.Schedules = p.Runs(), p.Jobs(), p.Inbox(), p.NLM(), p.Schedules()
	sc.Store, sc.Clock = p.Store(), p.Clock()
	feed, err := events.New(events.Config{Store: sc.Store, Clock: sc.Clock, Logger: sc.Logger, PollInterval: cfg.EventPollInterval,
		IdlePollInterval: cfg.EventIdlePollInterval, WriteTimeout: cfg.EventWriteTimeout})
	if err != nil {
		return fmt.Errorf("%w: event stream: %w", ErrInvalidConfig, err)
	}
	sc.Events, sc.Page, sc.Webhooks = feed, page.Handler(), nil
	if cfg.GitHubSecret != "" || cfg.SlackSigningSecret != "" {
		if sc.Webhooks, err = webhook.New(webhook.Config{Runner: sc.Runner, Store: sc.Store, GitHubSecret: cfg.GitHubSecret,
			SlackSigningSecret: cfg.SlackSigningSecret, Routes: cfg.WebhookRoutes, Clock: sc.Clock, Logger: sc.Logger}); err != nil {
			return fmt.Errorf("%w: webhooks: %w", ErrInvalidConfig, err)
		}
	} else if len(cfg.WebhookRoutes) > 0 {
		return fmt.Errorf("%w: webhook routes without a GitHub or Slack secret", ErrInvalidConfig)
	}
	api, err := New(sc)
	if err != nil {
		return err
	}
	log := sc.Logger
	if log == nil {
		log = slog.Default()
	}
	drain := cfg.Drain
	if drain <= 0 {
		drain = 15 * time.Second
	}
	// The server's limits (headers, idle keep-alives, header bytes,
	// connections per address; the Server bounds bodies) keep any one
	// client from holding the process's descriptors.
	srv, lln := sc.Limits.HTTPServer(api), sc.Limits.Listener(ln)
	if err := p.Add("http", func(ctx context.Context) error {
		if len(sc.Tokens) == 0 {
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
	return p.Add("events", feed.Run)
}
