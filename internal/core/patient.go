package core

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Patient is a driver (package storage/driver) that waits out transient
// failures of the one it wraps, usually a Store (storage.Transient); the
// engines call the Store storage.New makes over it. Each call is retried
// with backoff on Clock until it gets an answer or its context ends. When the context ends first,
// the error matches storage.ErrUnavailable, the context's error and the
// last failure. A conditional Put or Delete that failed transiently may
// have landed; when a retry then fails its condition, Patient reports
// storage.ErrOutcomeUnknown rather than a conflict, so the caller re-reads
// instead of applying a change twice.
type Patient struct {
	Store driver.Store
	// Clock paces the retries. Required.
	Clock clock.Clock
	// Log receives a WARN when a call gives up; nil discards.
	Log *slog.Logger
	// NewBackOff makes the schedule of one call's retries; nil means
	// DefaultRetryBackOff.
	NewBackOff func() backoff.BackOff

	retries atomic.Int64
}

// DefaultRetryBackOff retries from 50 ms, doubling, at most 2 s apart, with
// ±20 % jitter and no limit of its own: the caller's context is the limit.
func DefaultRetryBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// Retries counts the retries made so far (for metrics and tests).
func (p *Patient) Retries() int64 { return p.retries.Load() }

// retrier paces one call's retries.
type retrier struct {
	p     *Patient
	op    string
	key   string
	bo    backoff.BackOff
	start time.Time
}

func (p *Patient) retrier(op, key string) *retrier {
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
			r.bo = DefaultRetryBackOff()
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
	defer clock.Wait(ctx, p.Clock, func() bool { return ctx.Err() != nil || clock.Fired(t) })()
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
	return &storage.UnavailableError{Op: r.op, Key: r.key, Waited: waited, Err: err, Stop: ctxErr}
}

// Get implements driver.Store.
func (p *Patient) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	r := p.retrier("get", key)
	for {
		b, v, err := p.Store.Get(ctx, key)
		if !storage.Transient(err) {
			return b, v, err
		}
		if err := r.wait(ctx, err); err != nil {
			return nil, "", err
		}
	}
}

// Put implements driver.Store.
func (p *Patient) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	r := p.retrier("put", key)
	failed := false
	for {
		v, err := p.Store.Put(ctx, key, value, cond)
		if failed && cond.Kind() != storage.Unconditional && errors.Is(err, storage.ErrPreconditionFailed) {
			return "", storage.NewOpError("put", key, storage.ErrOutcomeUnknown,
				fmt.Errorf("a retry after a transient failure found the condition broken: %w", err))
		}
		if !storage.Transient(err) {
			return v, err
		}
		failed = true
		if err := r.wait(ctx, err); err != nil {
			return "", err
		}
	}
}

// Delete implements driver.Store.
func (p *Patient) Delete(ctx context.Context, key string, cond storage.Condition) error {
	r := p.retrier("delete", key)
	failed := false
	for {
		err := p.Store.Delete(ctx, key, cond)
		if failed && cond.Kind() != storage.Unconditional && errors.Is(err, storage.ErrPreconditionFailed) {
			return storage.NewOpError("delete", key, storage.ErrOutcomeUnknown,
				fmt.Errorf("a retry after a transient failure found the condition broken: %w", err))
		}
		if !storage.Transient(err) {
			return err
		}
		failed = true
		if err := r.wait(ctx, err); err != nil {
			return err
		}
	}
}

// ListAfter implements driver.Store. A listing that fails part-way is
// listed again after the wait, from the last key it yielded, so a retry
// costs what is left, not what was already read.
func (p *Patient) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		r := p.retrier("list", prefix)
		cursor := after
		for {
			var failure error
			for key, err := range p.Store.ListAfter(ctx, prefix, cursor) {
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
			if !storage.Transient(failure) {
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

// Unwrap returns the driver Patient wraps, so its optional interfaces
// (driver.Settler) are found through it.
func (p *Patient) Unwrap() driver.Store { return p.Store }
