package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Meta is embedded in every typed document. It carries the document's own
// version counter inside the JSON ("version": 1 on create, +1 per Update), so
// a reader of the raw object sees how many writes it has had, independent of
// the store's opaque Version. (003 §3.1's artifact "version": 1 is this
// field.)
type Meta struct {
	Version int64 `json:"version"`
}

// StorageMeta gives the typed-document functions the embedded Meta.
func (m *Meta) StorageMeta() *Meta { return m }

// Doc is the constraint of the typed-document functions: a pointer to a
// struct that embeds Meta. It is satisfied only by embedding Meta.
type Doc[T any] interface {
	*T
	StorageMeta() *Meta
}

// Create writes doc at key, create-only, with its version counter set to 1.
// An existing key gives an error matching ErrPreconditionFailed and leaves
// both the stored document and doc's counter untouched.
func Create[T any, P Doc[T]](ctx context.Context, s Store, key string, doc P) (Version, error) {
	m := doc.StorageMeta()
	old := m.Version
	m.Version = 1
	b, err := json.Marshal(doc)
	if err != nil {
		m.Version = old
		return "", fmt.Errorf("storage: encode %s: %w", key, err)
	}
	v, err := s.Put(ctx, key, b, IfNotExists())
	if err != nil {
		m.Version = old
		return "", err
	}
	return v, nil
}

// Read returns the document at key and the store version it was read at.
// A missing key gives an error matching ErrNotFound.
func Read[T any, P Doc[T]](ctx context.Context, s Store, key string) (T, Version, error) {
	var doc T
	b, v, err := s.Get(ctx, key)
	if err != nil {
		return doc, "", err
	}
	if err := json.Unmarshal(b, P(&doc)); err != nil {
		return doc, "", &CorruptError{Key: key, Version: v, Data: b, Reason: "cannot decode", Err: err}
	}
	return doc, v, nil
}

// UpdateOption tunes Update.
type UpdateOption func(*updateConfig)

type updateConfig struct {
	newBackOff func() backoff.BackOff
}

// WithBackOff replaces the schedule Update waits by between conflicting
// attempts. newBackOff is called once per Update; when the BackOff returns
// backoff.Stop, Update gives up with the last ErrPreconditionFailed.
func WithBackOff(newBackOff func() backoff.BackOff) UpdateOption {
	return func(c *updateConfig) { c.newBackOff = newBackOff }
}

// DefaultUpdateBackOff is the schedule Update uses unless WithBackOff says
// otherwise: exponential from 5 ms, factor 2, jitter ±50 %, at most 500 ms
// per wait, giving up after 30 s of conflicts. The short start matters
// because conflicts on one record are brief; the cap keeps a hot record from
// starving a writer for long.
func DefaultUpdateBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 5 * time.Millisecond
	b.Multiplier = 2
	b.RandomizationFactor = 0.5
	b.MaxInterval = 500 * time.Millisecond
	b.MaxElapsedTime = 30 * time.Second
	return b
}

// Update is the read-check-write loop of DESIGN.md §5: it reads the document
// at key, runs mutate on it, and writes the result with IfMatch on the
// version it read, the counter in Meta bumped by one. When another writer got
// there first it waits (see DefaultUpdateBackOff), re-reads and re-runs
// mutate on the fresh state, so mutate must be free of side effects other
// than on its argument and must check its own preconditions every time.
//
// An error from mutate is returned unchanged and nothing is written. A
// missing key gives ErrNotFound (Update never creates). Store errors other
// than ErrPreconditionFailed, ErrOutcomeUnknown included, end the loop and
// are returned as they are, so a change is never applied twice blindly. It returns the
// document as written and its new store version.
func Update[T any, P Doc[T]](ctx context.Context, s Store, key string, mutate func(P) error, opts ...UpdateOption) (T, Version, error) {
	cfg := updateConfig{newBackOff: DefaultUpdateBackOff}
	for _, o := range opts {
		o(&cfg)
	}
	var bo backoff.BackOff
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		doc, ver, err := Read[T, P](ctx, s, key)
		if err != nil {
			var zero T
			return zero, "", err
		}
		p := P(&doc)
		counter := p.StorageMeta().Version
		if err := mutate(p); err != nil {
			var zero T
			return zero, "", err
		}
		p.StorageMeta().Version = counter + 1
		b, err := json.Marshal(p)
		if err != nil {
			var zero T
			return zero, "", fmt.Errorf("storage: encode %s: %w", key, err)
		}
		nv, err := s.Put(ctx, key, b, IfMatch(ver))
		if err == nil {
			return doc, nv, nil
		}
		if !errors.Is(err, ErrPreconditionFailed) {
			var zero T
			return zero, "", err
		}
		if bo == nil {
			bo = cfg.newBackOff()
			bo.Reset()
		}
		d := bo.NextBackOff()
		if d == backoff.Stop {
			var zero T
			return zero, "", fmt.Errorf("storage: update %s: gave up after repeated conflicts: %w", key, err)
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, "", NewOpError("update", key, ctx.Err(), err)
		case <-timer.C:
		}
	}
}
