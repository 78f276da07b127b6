package nlm

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/pacing"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Run processes jobs until ctx ends: the ones Accept hands it at once, and
// the jobs in flight it finds in the store that no processor holds, looked
// for (accepted elsewhere, handed back, or held by a lost processor) soon
// after a look that found some and up to PollInterval apart while it finds
// none, up to Concurrency at a time. Poison records it meets are
// quarantined. When ctx ends it hands back the leases of the jobs it was
// processing and returns within StopGrace, even when stage goroutines
// ignore their context (they are logged as stragglers).
func (p *Processor) Run(ctx context.Context) error {
	s := &slots{p: p, free: make(chan struct{}, p.cfg.Concurrency)}
	p.loop(ctx, s)
	p.stop(&s.wg)
	return nil
}

// slots start jobs on goroutines of Run's, each job once, at most
// Concurrency at a time.
type slots struct {
	p    *Processor
	free chan struct{} // holds a token per job running
	wg   sync.WaitGroup
}

// start processes jobID on a goroutine of its own unless this processor
// runs it already; false when every slot is taken.
func (s *slots) start(ctx context.Context, jobID string) bool {
	p := s.p
	p.mu.Lock()
	if p.running[jobID] {
		p.mu.Unlock()
		return true
	}
	select {
	case s.free <- struct{}{}:
	default:
		p.mu.Unlock()
		return false
	}
	p.running[jobID] = true
	p.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_, err := p.Process(ctx, jobID)
		if err != nil && ctx.Err() == nil && !errors.Is(err, lifecycle.ErrTerminalState) {
			p.cfg.Logger.WarnContext(ctx, "nlm: job not processed", "job_id", jobID, "err", err)
		}
		p.mu.Lock()
		delete(p.running, jobID)
		p.mu.Unlock()
		<-s.free
		p.poke()
	}()
	return true
}

// drain starts the jobs Accept handed over; those no slot took wait for
// the next drain.
func (s *slots) drain(ctx context.Context) {
	p := s.p
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for i, id := range pending {
		if !s.start(ctx, id) {
			p.mu.Lock()
			p.pending = append(pending[i:], p.pending...)
			p.mu.Unlock()
			return
		}
	}
}

// poll starts the jobs in flight that no processor holds and reports
// whether it started one (found work): the adaptive schedule looks again
// soon after one that did.
func (s *slots) poll(ctx context.Context) (found bool) {
	for _, id := range s.p.candidates(ctx) {
		if !s.start(ctx, id) {
			return found
		}
		found = true
	}
	return found
}

// loop hands jobs to s until ctx ends: Accept's at once (it pokes the
// loop awake), the others found by the adaptive poll.
func (p *Processor) loop(ctx context.Context, s *slots) {
	// The loop counts as work on the clock except while it waits (a test's
	// fake clock moves only when it is idle; activity.Activity).
	lctx, end := activity.Enter(ctx, p.cfg.Clock)
	defer end()
	sched := pacing.Poll{Idle: p.cfg.PollInterval}
	wait := sched.Next(s.poll(ctx))
	for ctx.Err() == nil {
		s.drain(ctx)
		t := p.cfg.Clock.NewTimer(wait)
		resume := activity.Wait(lctx, p.cfg.Clock, func() bool { return ctx.Err() != nil || activity.Fired(t) || p.woken() })
		select {
		case <-ctx.Done():
			resume()
		case <-p.wake:
			resume()
		case <-t.C():
			resume()
			wait = sched.Next(s.poll(ctx))
		}
		t.Stop()
	}
}

// stop waits, at most StopGrace of wall-clock time, for the jobs Run
// started (each hands its lease back as its context ended) and for stage
// goroutines that ignore their context, which it logs when some remain.
func (p *Processor) stop(jobs *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { jobs.Wait(); close(done) }()
	grace, cancel := context.WithTimeout(context.Background(), p.cfg.StopGrace)
	defer cancel()
	select {
	case <-done:
	case <-grace.Done():
	}
	if n := p.units.Wait(grace); n > 0 {
		p.cfg.Logger.Warn("nlm: stopped with stage goroutines still running", "stragglers", n)
	}
}

func (p *Processor) hand(jobID string) {
	p.mu.Lock()
	p.pending = append(p.pending, jobID)
	p.mu.Unlock()
	p.poke()
}

// woken tells whether a wake-up is pending, without taking it.
func (p *Processor) woken() bool { return len(p.wake) > 0 }

func (p *Processor) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// candidates lists the jobs in flight (nlm/active/) that no processor
// holds, in one pass bounded by ten PollIntervals; on the way poison
// records are quarantined and the index entries of ended or missing jobs
// removed.
func (p *Processor) candidates(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*p.cfg.PollInterval)
	defer cancel()
	var ids []string
	now := p.now()
	for key, err := range p.store.List(ctx, activePrefix) {
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.WarnContext(ctx, "nlm: listing jobs in flight", "err", err)
			}
			break
		}
		jobID := key[len(activePrefix):]
		jk, err := layout.NLMJobKey(jobID)
		if err != nil {
			continue
		}
		p.mu.Lock()
		mine := p.running[jobID]
		p.mu.Unlock()
		if mine {
			continue
		}
		b, v, err := p.store.Get(ctx, jk)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			if p.absent.Confirmed(jobID, now) {
				p.staleMark(ctx, jobID, now)
			}
			continue
		case err != nil:
			p.cfg.Logger.WarnContext(ctx, "nlm: reading a job in flight", "job_id", jobID, "err", err)
			continue
		}
		if p.absent.Settle > 0 {
			p.absent.Found(jobID)
		}
		d, err := fence.Decode[jobDoc](jk, b, v, validator(jobID))
		if err != nil {
			_ = p.poisoned(ctx, err)
			continue
		}
		switch {
		case terminal(d.Status):
			p.unmark(ctx, jobID)
		case !records.LeaseLive(d.Lease, now):
			ids = append(ids, jobID)
		}
	}
	return ids
}

// staleMark removes the index entry of a job that does not exist, once it
// is older than a lease (an Accept may be between its two writes).
func (p *Processor) staleMark(ctx context.Context, jobID string, now time.Time) {
	b, _, err := p.store.Get(ctx, activeKey(jobID))
	if err != nil {
		return
	}
	var m activeMark
	if json.Unmarshal(b, &m) == nil && now.Sub(m.CreatedAt) < p.cfg.LeaseTTL {
		return
	}
	p.unmark(ctx, jobID)
}
