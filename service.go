package conveyor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/internal/probe"
)

// ErrUnsafeStore matches Start's refusal of a store that failed the
// start-up check of its semantics (Config.StoreCheck); the error names the
// failed checks.
var ErrUnsafeStore = errors.New("conveyor: the store does not keep the promises the engines rest on (docs/stores.md)")

// ErrStarted is Start's answer on a Client started before.
var ErrStarted = errors.New("conveyor: the Client was started already")

// services are the loops a Client runs between Start and Stop, in start
// order.
type services struct {
	mu      sync.Mutex
	list    []service
	started bool
	// failed holds the first error a loop ended with; stopped is closed
	// once every loop returned.
	failed  chan error
	stopped chan struct{}
}

type service struct {
	name   string
	run    func(context.Context) error
	cancel context.CancelFunc
	done   chan struct{}
}

// plan lists the loops in the order Start starts them: the Runner first,
// the janitor last (the only one of a SubmitOnly Client).
func (c *Client) plan() {
	c.life.failed, c.life.stopped = make(chan error, 1), make(chan struct{})
	if !c.cfg.SubmitOnly {
		if c.runner != nil {
			c.life.add("runner", c.runner.Run)
		}
		if c.jobs != nil {
			c.life.add("jobs", c.jobs.Run)
		}
		if c.nlm != nil {
			c.life.add("nlm", c.nlm.Run)
		}
		if c.cfg.InboxExpiry >= 0 {
			expiry := newInboxExpiry(c.box, c.cfg.InboxExpiry, c.clock, c.log)
			c.life.add("inbox expiry", func(ctx context.Context) error { return maintenance.Run(ctx, expiry) })
		}
		if c.sched != nil {
			c.life.add("scheduler", c.sched.Run)
		}
	}
	c.life.add("retention", c.janitor.Run)
}

func (l *services) add(name string, run func(context.Context) error) {
	l.list = append(l.list, service{name: name, run: run})
}

// Add adds a loop of the caller's, such as an HTTP server, to those Start
// starts: it starts after the Client's own and stops before them, in the
// reverse order of the calls. run runs until its context ends; an error
// other than the context's is sent to Failed. Add after Start is an error.
func (c *Client) Add(name string, run func(ctx context.Context) error) error {
	c.life.mu.Lock()
	defer c.life.mu.Unlock()
	if c.life.started {
		return ErrStarted
	}
	c.life.add(name, run)
	return nil
}

// Start checks the store (Config.StoreCheck) and starts every loop: the
// Runner, the job worker, the NLM processor, the inbox expiry, the
// Scheduler, the retention janitor, then those given to Add. ctx bounds
// the check; the loops run until Stop, keeping ctx's values.
func (c *Client) Start(ctx context.Context) error {
	l := &c.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	if err := c.checkStore(ctx); err != nil {
		return err
	}
	l.started = true
	runCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i := range l.list {
		s := &l.list[i]
		var sctx context.Context
		sctx, s.cancel = context.WithCancel(runCtx)
		s.done = make(chan struct{})
		wg.Go(func() {
			defer close(s.done)
			if err := s.run(sctx); err != nil && !errors.Is(err, context.Canceled) {
				select {
				case l.failed <- fmt.Errorf("%s: %w", s.name, err):
				default:
					c.log.Error("service_failed", "service", s.name, "error", err.Error())
				}
			}
		})
	}
	go func() { wg.Wait(); close(l.stopped) }()
	return nil
}

// Stop stops the loops in the reverse order of their start, each once the
// one after it returned, and returns once all did. When ctx ends first,
// it stops the rest at once and returns ctx's error without waiting for
// them; Stopped says when they are done. Stop before Start does nothing.
func (c *Client) Stop(ctx context.Context) error {
	l := &c.life
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if !started {
		return nil
	}
	for i := len(l.list) - 1; i >= 0; i-- {
		l.list[i].cancel()
		select {
		case <-l.list[i].done:
		case <-ctx.Done():
			for _, s := range l.list {
				s.cancel()
			}
			return ctx.Err()
		}
	}
	select {
	case <-l.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Failed receives the first error a loop ended with while the Client ran
// (later ones are logged as service_failed); the others keep running until
// Stop.
func (c *Client) Failed() <-chan error { return c.life.failed }

// Stopped is closed once every loop Start started has returned.
func (c *Client) Stopped() <-chan struct{} { return c.life.stopped }

// checkStore runs the start-up check of the store's semantics.
func (c *Client) checkStore(ctx context.Context) error {
	if c.cfg.StoreCheck == StoreCheckOff {
		return nil
	}
	start := time.Now()
	err := probe.Run(ctx, c.cfg.Store, probe.Config{})
	switch {
	case err == nil:
		c.log.Info("store_checked", "took_ms", time.Since(start).Milliseconds())
	case errors.Is(err, probe.ErrFailed) && c.cfg.StoreCheck == StoreCheckWarn:
		c.log.Warn("store_semantics_failed", "error", err.Error(),
			"msg_detail", "starting anyway: duplicate submits may start two runs, a job may run twice")
	case errors.Is(err, probe.ErrFailed):
		return fmt.Errorf("%w:\n%w", ErrUnsafeStore, err)
	default:
		return fmt.Errorf("conveyor: checking the store: %w", err)
	}
	return nil
}
