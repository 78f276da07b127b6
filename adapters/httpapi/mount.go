package httpapi

import (
	"context"
	"fmt"
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

// MountConfig is what Mount serves beyond the Parts.
type MountConfig struct {
	// Server configures the Server: Tokens, Logger, TracerProvider,
	// Limits, Metrics and the rest. Mount sets its engines, Store and Clock
	// from the Parts, and its Events, Page and Webhooks.
	Server Config
	// EventPoll, EventIdlePoll and EventWriteTimeout tune the event
	// stream: how often it lists the store's audit log, the longest gap
	// between listings of a store that cannot watch when nothing is new,
	// and how long a write to a client may wait. Default 250 ms, 5 s, 30 s.
	EventPoll, EventIdlePoll, EventWriteTimeout time.Duration
	// WebhookRoutes map the webhooks' events to agents; GitHubSecret and
	// SlackSigningSecret authenticate their sources, and a source without
	// one is not served. Routes without either secret are an error.
	WebhookRoutes                    []webhook.Route
	GitHubSecret, SlackSigningSecret string
	// Drain is how long the server's Shutdown waits for the requests in
	// flight once its loop ends, before it closes them. Default 15 s.
	Drain time.Duration
}

// Mount serves the HTTP API, with its event stream, live page and
// webhooks, over p on ln, with cfg.Server.Limits applied to the listener
// and the http.Server. It adds two loops to p: the server, then the event
// feed, which so stops first: its end ends the event streams Shutdown
// would wait for. ln is closed when the server's loop ends; an error
// matches ErrInvalidConfig, or is Add's.
func Mount(p Parts, ln net.Listener, cfg MountConfig) error {
	sc := cfg.Server
	sc.Runner, sc.Queue, sc.Inbox, sc.NLM, sc.Schedules = p.Runs(), p.Jobs(), p.Inbox(), p.NLM(), p.Schedules()
	sc.Store, sc.Clock = p.Store(), p.Clock()
	feed, err := events.New(events.Config{Store: sc.Store, Clock: sc.Clock, Logger: sc.Logger, PollInterval: cfg.EventPoll,
		IdlePollInterval: cfg.EventIdlePoll, WriteTimeout: cfg.EventWriteTimeout})
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
	drain := cfg.Drain
	if drain <= 0 {
		drain = 15 * time.Second
	}
	// The server's limits (headers, idle keep-alives, header bytes,
	// connections per address; the Server bounds bodies) keep any one
	// client from holding the process's descriptors.
	srv, lln := sc.Limits.HTTPServer(api), sc.Limits.Listener(ln)
	if err := p.Add("http", func(ctx context.Context) error {
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
