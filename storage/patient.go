package storage

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Retry says how a patient Store waits out its transient failures (see
// Store.Patient).
type Retry struct {
	// Clock paces the retries. Required.
	Clock clock.Clock
	// Log receives a WARN when a call starts retrying and when it gives
	// up; nil discards.
	Log *slog.Logger
	// NewBackOff makes the schedule of one call's retries; nil retries
	// from 50 ms, doubling, at most 2 s apart, with ±20 % jitter and no
	// limit of its own: the caller's context is the limit.
	NewBackOff func() backoff.BackOff
}

// Patient returns a Store over s that waits out s's transient failures
// (Transient): each call is retried with backoff on r.Clock until it gets
// an answer or its context ends. When the context ends first, the error
// matches ErrUnavailable, the context's error and the last failure. A
// conditional Put or Delete that failed transiently may have landed; when
// a retry then fails its condition, the patient Store reports
// ErrOutcomeUnknown rather than a conflict, so the caller re-reads instead
// of applying a change twice. A listing that fails part-way is listed
// again after the wait from the last key it yielded. Engines make their
// store patient with their own clock, and the deadlines of the units they
// serve bound the wait.
func (s *Store) Patient(r Retry) *Store { return New(&patient{Retry: r, d: s}) }

// Retries counts the retries a patient Store made so far (for metrics and
// tests); 0 for a Store that is not patient.
func (s *Store) Retries() int64 {
	if p, ok := s.d.(*patient); ok {
		return p.retries.Load()
	}
	return 0
}

// patient is the driver of a patient Store: the Store it makes patient,
// retried.
type patient struct {
	Retry
	d driver.Store

	retries atomic.Int64
}

// defaultRetryBackOff retries from 50 ms, doubling, at most 2 s apart, with
// ±20 % jitter and no limit of its own: the caller's context is the limit.
func defaultRetryBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// retrier paces one call's retries.
type retrier struct {
	p     *patient
	op    string
	key   string
	bo    backoff.BackOff
	start time.Time
}

func (p *patient) retrier(op, key string) *retrier {
	return &retrier{p: p, op: op, key: key}
}

// wait sleeps before the next retry of err; it returns the error to give up
// with once ctx ends (nil to go on).
func (r *retrier) wait(ctx context.Context, err error) error {
	p := r.p
	if r.bo == nil {
		r.start = p.Clock.Now()
		if p.NewBackOff != nil {
			r.bo = p.NewBackOff()
		} else {
			r.bo = defaultRetryBackOff()
		}
		// Trouble is said at once, not only when the wait gives up: a
		// call without a deadline may wait a long time.
		if p.Log != nil {
			p.Log.LogAttrs(ctx, slog.LevelWarn, "store_retrying", slog.String("op", r.op), slog.String("key", r.key),
				slog.String("error", err.Error()))
		}
	}
	d := r.bo.NextBackOff()
	if d == backoff.Stop {
		return r.giveUp(ctx, err, nil)
	}
	if ctx.Err() != nil {
		return r.giveUp(ctx, err, ctx.Err())
	}
	p.retries.Add(1)
	t := p.Clock.NewTimer(d)
	defer t.Stop()
	defer activity.Wait(ctx, p.Clock, func() bool { return ctx.Err() != nil || activity.Fired(t) })()
	select {
	case <-ctx.Done():
		return r.giveUp(ctx, err, ctx.Err())
	case <-t.C():
		return nil
	}
}

func (r *retrier) giveUp(ctx context.Context, err, ctxErr error) error {
	waited := r.p.Clock.Now().Sub(r.start)
	if r.p.Log != nil {
		r.p.Log.LogAttrs(ctx, slog.LevelWarn, "store_unavailable", slog.String("op", r.op), slog.String("key", r.key),
			slog.Duration("waited", waited), slog.String("error", err.Error()))
	}
	return &UnavailableError{Op: r.op, Key: r.key, Waited: waited, Err: err, Stop: ctxErr}
}

// Get implements driver.Store: Get, retried.
func (p *patient) Get(ctx context.Context, key string) ([]byte, Version, error) {
	r := p.retrier("get", key)
	for {
		b, v, err := p.d.Get(ctx, key)
		if !Transient(err) {
			return b, v, err
		}
		if err := r.wait(ctx, err); err != nil {
			return nil, "", err
		}
	}
}

// Put implements driver.Store.
func (p *patient) Put(ctx context.Context, key string, value []byte, cond Condition) (Version, error) {
	r := p.retrier("put", key)
	failed := false
	for {
		v, err := p.d.Put(ctx, key, value, cond)
		if failed && cond.Kind() != driver.Unconditional && errors.Is(err, ErrPreconditionFailed) {
			return "", newOpError("put", key, ErrOutcomeUnknown,
				fmt.Errorf("a retry after a transient failure found the condition broken: %w", err))
		}
		if !Transient(err) {
			return v, err
		}
		failed = true
		if err := r.wait(ctx, err); err != nil {
			return "", err
		}
	}
}

// Delete implements driver.Store.
func (p *patient) Delete(ctx context.Context, key string, cond Condition) error {
	r := p.retrier("delete", key)
	failed := false
	for {
		err := p.d.Delete(ctx, key, cond)
		if failed && cond.Kind() != driver.Unconditional && errors.Is(err, ErrPreconditionFailed) {
			return newOpError("delete", key, ErrOutcomeUnknown,
				fmt.Errorf("a retry after a transient failure found the condition broken: %w", err))
		}
		if !Transient(err) {
			return err
		}
		failed = true
		if err := r.wait(ctx, err); err != nil {
			return err
		}
	}
}

// Commit implements driver.Committer: Commit, retried, when the Store made
// patient can commit (else it fails as that Store's Commit does). A commit
// that failed transiently may have landed, all of it; when a retry then
// fails a condition, the outcome is reported unknown, as for Put.
func (p *patient) Commit(ctx context.Context, writes []driver.Write) ([]Version, error) {
	c, ok := p.d.(driver.Committer)
	if !ok {
		return nil, newOpError("commit", "", errors.ErrUnsupported, nil)
	}
	key := ""
	if len(writes) > 0 {
		key = writes[0].Key
	}
	conditional := slices.ContainsFunc(writes, func(w driver.Write) bool { return w.Cond.Kind() != driver.Unconditional })
	r := p.retrier("commit", key)
	failed := false
	for {
		vs, err := c.Commit(ctx, writes)
		if failed && conditional && errors.Is(err, ErrPreconditionFailed) {
			return nil, newOpError("commit", key, ErrOutcomeUnknown,
				fmt.Errorf("a retry after a transient failure found a condition broken: %w", err))
		}
		if !Transient(err) {
			return vs, err
		}
		failed = true
		if err := r.wait(ctx, err); err != nil {
			return nil, err
		}
	}
}

// ListAfter implements driver.Store. A listing that fails part-way is
// listed again after the wait, from the last key it yielded, so a retry
// costs what is left, not what was already read.
func (p *patient) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		r := p.retrier("list", prefix)
		cursor := after
		for {
			var failure error
			for key, err := range p.d.ListAfter(ctx, prefix, cursor) {
				if err != nil {
					failure = err
					break
				}
				if key <= cursor {
					continue // an adapter breaking its order must not repeat a key
				}
				cursor = key
				if !yield(key, nil) {
					return
				}
			}
			if failure == nil {
				return
			}
			if !Transient(failure) {
				yield("", failure)
				return
			}
			if err := r.wait(ctx, failure); err != nil {
				yield("", err)
				return
			}
		}
	}
}

// Unwrap returns the Store made patient, so its driver's capabilities
// (driver.Settler) are found through it.
func (p *patient) Unwrap() driver.Store { return p.d }
