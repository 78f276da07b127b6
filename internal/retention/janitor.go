package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/maintenance"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Janitor deletes finished history past its retention age (Config), a
// maintenance service. Every process sharing a store may run one: a pass
// is due every Config.Interval, and the janitor that takes the turn (the
// lease in retention/janitor.json, maintenance.Turn) makes it, page by
// page, recording its cursor after each page, so a pass whose janitor
// died is resumed where it stopped by whichever janitor takes the lapsed
// lease. Every delete is conditional on the version the janitor judged
// (storage.IfMatch), so a record changed after it was read is kept.
type Janitor struct {
	maintenance.Base
	cfg Config
	// artifacts deletes artifacts by the admin's cleanup, with the
	// Artifacts kind's age as its cleanup age.
	artifacts *artifact.Store
	turn      *maintenance.Turn[state, *state]
	// suspects are the pending-index entries read without their record
	// on a store that settles (visitPendingEntry).
	suspects absences
}

// New checks cfg and returns its Janitor.
func New(cfg Config) (*Janitor, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	arts, err := artifact.New(artifact.Config{Store: c.Store, Clock: c.Clock, Node: c.Owner, Logger: c.Logger,
		CleanupAge: max(c.AgeOf(Artifacts), time.Nanosecond)})
	if err != nil {
		return nil, err
	}
	j := &Janitor{cfg: c, artifacts: arts,
		Base: maintenance.Base{Name: "retention_pass", Clock: c.Clock, Logger: c.Logger, Period: c.Check}}
	j.turn = &maintenance.Turn[state, *state]{
		Store: c.Store, Key: layout.JanitorKey, Owner: c.Owner, Clock: c.Clock, TTL: c.LeaseTTL, Lapse: true,
		// A pass is due once the last one ended an Interval ago, or at
		// once when one was left unfinished.
		Due: func(s *state, now time.Time) bool { return s.Pass != nil || !now.Before(s.NextPassAt) },
		Begin: func(s *state, now time.Time) {
			if s.Pass == nil {
				s.Pass = &cursor{Started: now, Kind: Kinds()[0], IdemFull: idemFullDue(j.cfg.IdempotencyFullListing, s, now)}
			}
		},
		Quarantine: j.quarantine,
	}
	return j, nil
}

// Config returns the janitor's configuration, defaults filled in.
func (j *Janitor) Config() Config { return j.cfg }

// Report counts the work of one call of Pass that held the lease.
type Report struct {
	// Owner is the janitor that did the work; Epoch its lease's epoch.
	Owner string `json:"owner"`
	Epoch int64  `json:"epoch"`
	// Started and Ended bound the call, by the janitor's clock.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Resumed is set when the call went on with a pass another janitor
	// (or an earlier call) left unfinished.
	Resumed bool `json:"resumed,omitempty"`
	// Done is set when the pass reached the end of every kind.
	Done bool `json:"done"`
	// Listed counts the keys read from listings.
	Listed int `json:"listed"`
	// Deleted counts the records deleted, by kind (a run counts once,
	// whatever its folder held; an audit day counts its events).
	Deleted map[Kind]int `json:"deleted,omitempty"`
	// Keys counts the keys deleted: the records and a run's whole folder
	// (its index entries, deleted whether or not there, are not counted).
	Keys int `json:"keys"`
	// Changed counts records left because they changed (or vanished)
	// between the janitor's read and its delete.
	Changed int `json:"changed,omitempty"`
	// Skipped counts records that could not be judged (they do not
	// decode), which are left to their engine's quarantine, and index
	// entries whose key names no record (skipped where they are).
	Skipped int `json:"skipped,omitempty"`
	// Refiled counts idempotency records read through their expiry entry
	// but not expired yet, filed again under their current expiry.
	Refiled int `json:"refiled,omitempty"`
	// Err is the error that ended the call early, if any.
	Err string `json:"error,omitempty"`
}

func (r *Report) deleted(k Kind, n int) {
	if r.Deleted == nil {
		r.Deleted = map[Kind]int{}
	}
	r.Deleted[k] += n
}

// state is the janitor's lease record, at layout.JanitorKey.
type state struct {
	lifecycle.Meta

	// Lease is held by the janitor making a pass; between passes its
	// Owner is empty and its Epoch kept, so epochs only grow.
	Lease lifecycle.Lease `json:"lease,omitzero"`
	// Pass is set while a pass is under way: when it started, the kind it
	// is at and the last key done there.
	Pass *cursor `json:"pass,omitempty"`
	// NextPassAt is when the next pass is due.
	NextPassAt time.Time `json:"next_pass_at"`
	// LastPass is the report of the call that ended the last pass.
	LastPass *Report `json:"last_pass,omitempty"`
	// IdemFullAt is when the last pass that listed every idempotency
	// record started (zero: none did, as after an upgrade from a release
	// without the expiry index).
	IdemFullAt time.Time `json:"idempotency_full_at,omitzero"`
}

// TurnLease is the janitor's lease, for maintenance.Turn.
func (s *state) TurnLease() *lifecycle.Lease { return &s.Lease }

type cursor struct {
	Started time.Time `json:"started"`
	Kind    Kind      `json:"kind"`
	After   string    `json:"after,omitempty"`
	// IdemFull is set on a pass that lists every idempotency record, not
	// only those of the expiry index's past hours (idemFullDue).
	IdemFull bool `json:"idempotency_full,omitempty"`
}

// Run calls Pass every Config.Check until ctx ends, and returns nil then;
// with retention off it returns at once. A pass that fails is logged at
// WARN (retention_pass_failed) and retried at a later check.
func (j *Janitor) Run(ctx context.Context) error {
	if !j.cfg.Enabled() {
		return nil
	}
	return maintenance.Run(ctx, j)
}

// Start runs Run in a goroutine of its own until stop is called or ctx
// ends; stop waits for it to return. With retention off it starts none.
func (j *Janitor) Start(ctx context.Context) (stop func()) {
	if !j.cfg.Enabled() {
		return func() {}
	}
	return maintenance.Start(ctx, j)
}

// RunOnce makes the pass that is due, if it is this janitor's turn (Pass).
func (j *Janitor) RunOnce(ctx context.Context) error {
	_, _, err := j.Pass(ctx)
	return err
}

// Pass makes the pass that is due, or the rest of one a janitor left
// unfinished, if this janitor can take the lease: ran tells whether it
// did. It returns when the pass is done, or earlier with an error (its
// context ended, the store failed, the lease was lost); the work done
// stays done and the next janitor resumes after it.
func (j *Janitor) Pass(ctx context.Context) (r Report, ran bool, err error) {
	if !j.cfg.Enabled() {
		return r, false, nil
	}
	rec, before, st, err := j.turn.Take(ctx)
	if errors.Is(err, maintenance.ErrNotMyTurn) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	resumed := before.Pass != nil
	now := j.cfg.Clock.Now().UTC()
	r = Report{Owner: j.cfg.Owner, Epoch: st.Lease.Epoch, Started: now, Resumed: resumed}
	err = j.work(ctx, rec, st.Pass, &r)
	r.Ended = j.cfg.Clock.Now().UTC()
	if err == nil {
		r.Done = true
		err = j.finish(ctx, rec, &r)
	}
	if err != nil {
		r.Err = err.Error()
	}
	j.report(ctx, &r)
	return r, true, err
}

// quarantine moves a lease record that does not decode to quarantine
// (it blocks nothing), for the turn to be made anew.
func (j *Janitor) quarantine(ctx context.Context, ce *lifecycle.QuarantinedError) error {
	if _, err := records.Quarantine(ctx, j.cfg.Store, ce, j.cfg.Clock.Now().UTC()); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	j.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "record_quarantined", slog.String("key", ce.Key), slog.String("reason", ce.Reason))
	return nil
}

// checkpoint records the cursor and renews the lease; it fails with
// lifecycle.ErrLeaseLost once the lease is another janitor's or lapsed.
func (j *Janitor) checkpoint(ctx context.Context, rec *fence.Record[state, *state], c cursor) error {
	return j.turn.Renew(ctx, rec, func(s *state) { s.Pass = &c })
}

// finish ends the pass: the next one is due an Interval from now, and the
// lease is given back (its epoch kept).
func (j *Janitor) finish(ctx context.Context, rec *fence.Record[state, *state], r *Report) error {
	next := j.cfg.Clock.Now().UTC().Add(j.cfg.Interval)
	return j.turn.Release(ctx, rec, func(s *state) {
		if s.Pass != nil && s.Pass.IdemFull {
			s.IdemFullAt = s.Pass.Started
		}
		s.Pass, s.NextPassAt, s.LastPass = nil, next, r
	})
}

// work goes through the kinds from c, a page at a time.
func (j *Janitor) work(ctx context.Context, rec *fence.Record[state, *state], c *cursor, r *Report) error {
	kinds := Kinds()
	i := slices.Index(kinds, c.Kind)
	if i < 0 {
		i, c = 0, &cursor{Started: c.Started, Kind: kinds[0]}
	}
	cur := *c
	for ; i < len(kinds); i++ {
		k := kinds[i]
		if cur.Kind != k {
			cur = cursor{Started: c.Started, Kind: k, IdemFull: c.IdemFull}
		}
		age := j.cfg.AgeOf(k)
	pages:
		for age >= 0 {
			keys, err := j.page(ctx, k, cur, age)
			r.Listed += len(keys)
			if err != nil {
				return err
			}
			if len(keys) == 0 {
				break
			}
			for _, key := range keys {
				if err := j.turn.Renewed(ctx, rec); err != nil {
					return err
				}
				err := j.visit(ctx, k, key, age, r)
				if errors.Is(err, errKindDone) {
					break pages
				}
				if err != nil {
					return fmt.Errorf("retention: %s: %w", key, err)
				}
			}
			cur.After = keys[len(keys)-1]
			if err := j.checkpoint(ctx, rec, cur); err != nil {
				return err
			}
		}
	}
	return nil
}

// page lists up to Config.Page keys of kind k after cur.After, across the
// kind's prefixes in key order (for Idempotency, idemPrefixes), stopping
// at a key not listed yet that nothing at or after can be eligible
// (idemStop).
func (j *Janitor) page(ctx context.Context, k Kind, cur cursor, age time.Duration) ([]string, error) {
	var keys []string
	ps, stop := prefixes[k], ""
	if k == Idempotency {
		ps, stop = idemPrefixes(cur.IdemFull), idemStop(j.cfg.Clock.Now(), age)
	}
	for _, prefix := range ps {
		for key, err := range j.cfg.Store.ListAfter(ctx, prefix, cur.After) {
			if err != nil {
				return keys, err
			}
			if stop != "" && key >= stop {
				break
			}
			keys = append(keys, key)
			if len(keys) == j.cfg.Page {
				return keys, nil
			}
		}
	}
	return keys, nil
}

// report logs and counts the work of one call.
func (j *Janitor) report(ctx context.Context, r *Report) {
	attrs := []slog.Attr{
		slog.String("owner", r.Owner), slog.Int64("epoch", r.Epoch),
		slog.Bool("done", r.Done), slog.Bool("resumed", r.Resumed),
		slog.Int("listed", r.Listed), slog.Int("keys_deleted", r.Keys),
		slog.Int("changed", r.Changed), slog.Int("skipped", r.Skipped), slog.Int("refiled", r.Refiled),
		slog.Duration("took", r.Ended.Sub(r.Started)),
	}
	for _, k := range Kinds() {
		if n := r.Deleted[k]; n > 0 {
			attrs = append(attrs, slog.Int("deleted_"+string(k), n))
		}
	}
	level := slog.LevelInfo
	if r.Err != "" {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", r.Err))
	}
	j.cfg.Logger.LogAttrs(context.WithoutCancel(ctx), level, "retention_pass", attrs...)
	if j.cfg.Metrics != nil {
		j.cfg.Metrics.RetentionPass(*r)
	}
}
