package inbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/internal/quarantine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// defaultTTL is an entry's lifetime while pending unless it says otherwise
// (ttl_hours, docs/spec.md#inbox-entry: default 72).
const defaultTTL = 72 * time.Hour

// maxTTLHours bounds metadata.ttl_hours: one year.
const maxTTLHours = 24 * 366

// Config configures a Box.
type Config struct {
	// Store holds the entries and the audit log. Required.
	Store *storage.Store
	// Clock stamps created_at and decides expiry. Default: the wall clock.
	Clock clock.Clock
	// Node names this host in audit events. Default: "".
	Node string
	// DefaultTTL is the lifetime of entries submitted without ttl_hours; it
	// is rounded up to whole hours, at most a year. Default: 72 h.
	DefaultTTL time.Duration
	// Logger receives audit write failures. Default: slog.Default().
	Logger *slog.Logger
	// Dispatch, when set, is called with each entry the validation gate
	// accepted, once it is stored, and answers the id of the job it
	// enqueued for the entry, or "" for none (docs/spec.md#inbox-jobs). The
	// Box records that id on the entry (job_id). It must be idempotent: an
	// entry whose call failed, or whose id was not recorded, is offered
	// again by DispatchPending. A failure is logged and leaves the entry
	// pending without a job; Submit still succeeds. Default nil: entries
	// start no jobs.
	Dispatch func(ctx context.Context, e lifecycle.InboxEntry) (jobID string, err error)
}

// Box is the inbox (docs/spec.md#inbox-entry-lifecycle) over a Store: entries live at
// inbox/{id}.json while pending, processed or rejected, and move to
// inbox/expired/{id}.json when their TTL runs out; nothing is ever deleted
// for good. It is safe for concurrent use, also across processes.
type Box struct {
	cfg   Config
	ttlH  int
	audit *records.AuditLog
	quar  *quarantine.Mover
}

// New returns a Box for cfg.
func New(cfg Config) (*Box, error) {
	if cfg.Store == nil {
		return nil, errors.New("inbox: Config.Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = defaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := int((cfg.DefaultTTL + time.Hour - 1) / time.Hour)
	if h > maxTTLHours {
		return nil, fmt.Errorf("inbox: DefaultTTL %s is longer than %d hours", cfg.DefaultTTL, maxTTLHours)
	}
	return &Box{cfg: cfg, ttlH: h, audit: &records.AuditLog{Store: cfg.Store, Node: cfg.Node, Now: cfg.Clock.Now},
		quar: &quarantine.Mover{Store: cfg.Store, Clock: cfg.Clock, Log: cfg.Logger}}, nil
}

// read reads an entry. One that cannot be decoded is quarantined and reads
// as missing (storage.ErrNotFound), so a poison entry never stops a listing, the
// stats or the expiry pass.
func (b *Box) read(ctx context.Context, key string) (entryDoc, storage.Version, error) {
	d, v, err := records.Read[entryDoc](ctx, b.cfg.Store, key)
	var ce *lifecycle.QuarantinedError
	if errors.As(err, &ce) {
		if _, qerr := b.quar.Move(ctx, ce); qerr != nil && !errors.Is(qerr, storage.ErrPreconditionFailed) {
			return d, v, qerr
		}
		return d, v, fmt.Errorf("inbox: %w (quarantined): %w", storage.ErrNotFound, err)
	}
	return d, v, err
}

// Errors of the inbox, each with a code of lifecycle's one table
// (lifecycle.ErrorCode, the code table (docs/spec.md#error-codes)):
//
//   - bad input matches ErrInvalidEntry (and, for a text field that broke
//     its limit or was not clean, a *lifecycle.InputError): INVALID_INPUT
//     (400) or INPUT_TOO_LARGE (413) for text, INVALID_REQUEST (400) for the
//     other rules;
//   - an id in use matches lifecycle.ErrInboxEntryExists: INBOX_ENTRY_EXISTS (409);
//   - a missing entry matches storage.ErrNotFound: NOT_FOUND (404);
//   - a move the machine does not allow matches
//     lifecycle.ErrInvalidTransition: INBOX_ENTRY_EXPIRED (410) from an
//     expired entry, INBOX_INVALID_TRANSITION (409) otherwise;
//   - a refused actor matches lifecycle.ErrForbiddenActor: FORBIDDEN (403).
var ErrInvalidEntry = errors.New("inbox: invalid entry")

// codedError gives an error of another package, or a sentinel, the inbox's
// code, which lifecycle.ErrorCode finds before any code further down the
// chain.
type codedError struct {
	err  error
	code string
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }
func (e *codedError) Code() string  { return e.code }

// transitionError gives a refused move its inbox code: an expired entry can
// do nothing any more (410), other refusals are conflicts (409).
func transitionError(err error) error {
	var ite *lifecycle.InvalidTransitionError
	if !errors.As(err, &ite) {
		return err
	}
	if ite.From == string(lifecycle.InboxExpired) {
		return &codedError{err: err, code: codes.InboxEntryExpired}
	}
	return &codedError{err: err, code: codes.InboxInvalidTransition}
}

// validationError says which field of a submission is wrong. It matches
// ErrInvalidEntry, and a *lifecycle.InputError when the field's text broke
// its limit or was not clean.
type validationError struct {
	Field  string
	Reason string
	// Err is the *lifecycle.InputError of a text field, or nil.
	Err error
}

// Error renders the field and the reason.
func (e *validationError) Error() string { return "inbox: invalid " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidEntry and Err, if set.
func (e *validationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidEntry}
	}
	return []error{ErrInvalidEntry, e.Err}
}

// Code is that of Err (INVALID_INPUT or INPUT_TOO_LARGE) for a text field,
// else INVALID_REQUEST.
func (e *validationError) Code() string {
	if e.Err != nil {
		return lifecycle.ErrorCode(e.Err)
	}
	return codes.InvalidRequest
}

func invalid(field, format string, args ...any) error {
	return &validationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// decodeSubmission decodes a submission from JSON, refusing unknown fields
// and trailing data, and validates it.
func decodeSubmission(data []byte) (lifecycle.InboxSubmission, error) {
	var s lifecycle.InboxSubmission
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return lifecycle.InboxSubmission{}, invalid("body", "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return lifecycle.InboxSubmission{}, invalid("body", "trailing data after the JSON object")
	}
	return s, validate(&s)
}

var sourceTypes = []string{"ui", "telegram", "webhook", "agent", "cron"}

// text checks a text field with lifecycle's one input check (limits shared
// with the rest of the SDK); required refuses the empty string.
func text(field, s string, limit int, kind codes.TextKind, required bool) error {
	if s == "" && required {
		return invalid(field, "empty")
	}
	err := codes.CheckText(field, s, limit, kind)
	if ie := (*lifecycle.InputError)(nil); errors.As(err, &ie) {
		return &validationError{Field: field, Reason: ie.Reason, Err: err}
	}
	return err
}

// validate is the validation gate at submission (Submit).
func validate(s *lifecycle.InboxSubmission) error {
	// The fields of a fixed set are text too: invalid UTF-8 in one is
	// INVALID_INPUT, as in any other field, before its value is judged.
	for _, f := range []struct{ name, v string }{{"source.type", s.Source.Type}, {"intent.action", s.Intent.Action}, {"metadata.priority", s.Metadata.Priority}} {
		if err := text(f.name, f.v, codes.MaxNameBytes, codes.OneLine, false); err != nil {
			return err
		}
	}
	if s.ID != "" {
		if err := storekey.ValidateID("inbox entry id", s.ID); err != nil {
			return invalid("id", "%v", err)
		}
	}
	ok := false
	for _, t := range sourceTypes {
		ok = ok || s.Source.Type == t
	}
	if !ok {
		return invalid("source.type", "%q is not one of %s", s.Source.Type, strings.Join(sourceTypes, ", "))
	}
	if err := text("source.identity", s.Source.Identity, codes.MaxNameBytes, codes.OneLine, true); err != nil {
		return err
	}
	if s.Intent.Action == "" || len(s.Intent.Action) > 64 {
		return invalid("intent.action", "must be 1 to 64 bytes")
	}
	for _, c := range []byte(s.Intent.Action) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return invalid("intent.action", "%q is not lower-case letters, digits and \"-\"", s.Intent.Action)
		}
	}
	if err := text("intent.target", s.Intent.Target, codes.MaxRefBytes, codes.OneLine, true); err != nil {
		return err
	}
	if s.Metadata.Priority != "" && s.Metadata.Priority != "normal" && s.Metadata.Priority != "high" {
		return invalid("metadata.priority", "%q is not normal or high", s.Metadata.Priority)
	}
	if s.Metadata.TTLHours < 0 || s.Metadata.TTLHours > maxTTLHours {
		return invalid("metadata.ttl_hours", "%d is outside 1..%d", s.Metadata.TTLHours, maxTTLHours)
	}
	return text("metadata.correlation_id", s.Metadata.CorrelationID, codes.MaxNameBytes, codes.OneLine, false)
}

// entryDoc is the stored form of an Entry.
type entryDoc struct {
	lifecycle.Meta

	lifecycle.InboxEntry
}

func newEntryID(now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "inbox_" + now.UTC().Format("2006-01-02") + "_" + hex.EncodeToString(b[:])
}

// forbidden refuses a write by an actor the inbox machine does not list.
func forbidden(to lifecycle.InboxState, event lifecycle.Event, actor lifecycle.Actor, allowed lifecycle.Actor) error {
	return &lifecycle.ForbiddenActorError{Machine: machine.InboxMachine().Name(), To: string(to), Event: string(event),
		Actor: actor, Allowed: []lifecycle.Actor{allowed}}
}

// Submit passes sub through the validation gate (→ pending,
// docs/spec.md#inbox-entry-lifecycle) and stores it as a pending entry.
// Only the gateway (the platform's Worker) submits. Bad input
// (ErrInvalidEntry), a refused actor (FORBIDDEN) or an id in use
// (lifecycle.ErrInboxEntryExists) writes nothing. The gate:
//
//   - id, if set, is a valid storage id;
//   - source.type is one of ui, telegram, webhook, agent, cron, and
//     source.identity is set (at most 256 bytes);
//   - intent.action is set, lower-case letters, digits and "-" (at most 64
//     bytes), and intent.target is set (at most 1,024 bytes);
//   - metadata.priority is "normal" (the default when empty) or "high";
//     metadata.ttl_hours is 0 (the Box's default) or 1..8784 (a year);
//     metadata.correlation_id has at most 256 bytes.
//
// Text fields must be one line of UTF-8 without control characters
// (the SDK's text check, docs/spec.md#limits). A refusal matches
// ErrInvalidEntry and names the field.
func (b *Box) Submit(ctx context.Context, actor lifecycle.Actor, sub lifecycle.InboxSubmission) (lifecycle.InboxEntry, error) {
	if actor != lifecycle.ActorGateway {
		return lifecycle.InboxEntry{}, forbidden(lifecycle.InboxPending, "submit", actor, lifecycle.ActorGateway)
	}
	if err := validate(&sub); err != nil {
		return lifecycle.InboxEntry{}, err
	}
	if t := lifecycle.TenantOf(ctx); sub.ID != "" && t != "" && t != lifecycle.AllTenants {
		// Entry ids are one namespace for every tenant: an id another
		// tenant holds would answer "exists" (docs/design.md#tenants).
		return lifecycle.InboxEntry{}, invalid("id", "an entry of tenant %s takes the inbox's id", t)
	}
	now := b.cfg.Clock.Now().UTC()
	if sub.ID == "" {
		sub.ID = newEntryID(now)
	}
	if sub.Metadata.Priority == "" {
		sub.Metadata.Priority = "normal"
	}
	if sub.Metadata.TTLHours == 0 {
		sub.Metadata.TTLHours = b.ttlH
	}
	key, err := layout.InboxKey(sub.ID)
	if err != nil {
		return lifecycle.InboxEntry{}, err
	}
	expiredKey, _ := layout.InboxExpiredKey(sub.ID)
	if _, _, err := b.cfg.Store.Get(ctx, expiredKey); err == nil {
		return lifecycle.InboxEntry{}, fmt.Errorf("%w: %s (expired)", lifecycle.ErrInboxEntryExists, sub.ID)
	} else if !errors.Is(err, storage.ErrNotFound) {
		return lifecycle.InboxEntry{}, err
	}
	if b.cfg.Store.SettleTime() > 0 {
		// A store that settles may take the create-only write below over
		// an existing entry (and send a processed one back to pending):
		// an entry found is lifecycle.ErrInboxEntryExists, unwritten.
		if _, _, err := b.cfg.Store.Get(ctx, key); err == nil {
			return lifecycle.InboxEntry{}, fmt.Errorf("%w: %s", lifecycle.ErrInboxEntryExists, sub.ID)
		} else if !errors.Is(err, storage.ErrNotFound) {
			return lifecycle.InboxEntry{}, err
		}
	}
	doc := entryDoc{InboxEntry: lifecycle.InboxEntry{ID: sub.ID, Source: sub.Source, Intent: sub.Intent, Metadata: sub.Metadata,
		Status: lifecycle.InboxPending, CreatedAt: now, TenantID: tenancy.Creating(ctx)}}
	if _, err := records.Create(ctx, b.cfg.Store, key, &doc); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return lifecycle.InboxEntry{}, fmt.Errorf("%w: %s", lifecycle.ErrInboxEntryExists, sub.ID)
		}
		return lifecycle.InboxEntry{}, err
	}
	// The job first, so the stream's inbox.new finds the entry linked.
	e := b.dispatch(ctx, doc.InboxEntry)
	b.record(ctx, actor, &doc.InboxEntry, "")
	return e, nil
}

func (b *Box) record(ctx context.Context, actor lifecycle.Actor, e *lifecycle.InboxEntry, from lifecycle.InboxState) {
	id, to := e.ID, e.Status
	ev := lifecycle.AuditEvent{Event: "inbox.status.update", Actor: string(actor), EntryID: id, TenantID: e.TenantID, From: string(from), To: string(to)}
	if from == "" {
		ev.Event = "inbox.create"
	}
	if _, err := b.audit.Record(ctx, ev); err != nil {
		b.cfg.Logger.ErrorContext(ctx, "inbox: audit write failed", "entry_id", id, "to", to, "err", err)
	}
}

// move fires event on the live entry id as actor, with set applied after.
func (b *Box) move(ctx context.Context, actor lifecycle.Actor, id string, event lifecycle.Event, set func(*lifecycle.InboxEntry)) (lifecycle.InboxEntry, error) {
	key, err := layout.InboxKey(id)
	if err != nil {
		return lifecycle.InboxEntry{}, err
	}
	var from lifecycle.InboxState
	_, d, err := (&fence.Record[entryDoc, *entryDoc]{Store: b.cfg.Store, Key: key}).Apply(ctx, func(d *entryDoc) error {
		if !tenancy.Sees(ctx, d.TenantID) {
			return notFound(key)
		}
		from = d.Status
		if _, err := machine.InboxMachine().Fire(ctx, &d.InboxEntry, event, actor); err != nil {
			return transitionError(err)
		}
		if set != nil {
			set(&d.InboxEntry)
		}
		return nil
	})
	if errors.Is(err, storage.ErrNotFound) {
		// An expired entry has moved; report it as the terminal state it is.
		if e, gerr := b.Get(ctx, id); gerr == nil {
			_, err = machine.InboxMachine().Fire(ctx, &e, event, actor)
			return lifecycle.InboxEntry{}, transitionError(err)
		}
	}
	if err != nil {
		return lifecycle.InboxEntry{}, err
	}
	b.record(ctx, actor, &d.InboxEntry, from)
	return d.InboxEntry, nil
}

// Process records that the validation gate passed and the entry became
// proposal proposalID: pending → processed. Only the gateway processes.
func (b *Box) Process(ctx context.Context, actor lifecycle.Actor, id, proposalID string) (lifecycle.InboxEntry, error) {
	if err := storekey.ValidateID("proposal id", proposalID); err != nil {
		return lifecycle.InboxEntry{}, invalid("proposal_id", "%v", err)
	}
	return b.move(ctx, actor, id, machine.EventInboxProcess, func(e *lifecycle.InboxEntry) { e.ProposalID = proposalID })
}

// Reject records that the validation gate refused the entry: pending →
// rejected, with the reason (1 byte to 4,096 bytes, may span
// lines, as every reason in the SDK). Only the gateway rejects.
func (b *Box) Reject(ctx context.Context, actor lifecycle.Actor, id, reason string) (lifecycle.InboxEntry, error) {
	if err := text("rejection_reason", reason, codes.MaxTextBytes, codes.MultiLine, true); err != nil {
		return lifecycle.InboxEntry{}, err
	}
	return b.move(ctx, actor, id, machine.EventInboxReject, func(e *lifecycle.InboxEntry) { e.RejectionReason = reason })
}

// Get returns an entry, live or expired.
func (b *Box) Get(ctx context.Context, id string) (lifecycle.InboxEntry, error) {
	key, err := layout.InboxKey(id)
	if err != nil {
		return lifecycle.InboxEntry{}, err
	}
	d, _, err := b.read(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		ek, _ := layout.InboxExpiredKey(id)
		d, _, err = b.read(ctx, ek)
	}
	if err == nil && !tenancy.Sees(ctx, d.TenantID) {
		ek, _ := layout.InboxExpiredKey(id) // the key a missing entry is last looked for at
		return lifecycle.InboxEntry{}, notFound(ek)
	}
	return d.InboxEntry, err
}

// notFound is the store's error for key read missing: another tenant's
// entry answers as one (docs/design.md#tenants).
func notFound(key string) error {
	return &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound}
}

// ExpireDue is the system's cron (docs/spec.md#inbox-entry-lifecycle): every pending entry whose TTL
// has run out goes pending → expired and moves to inbox/expired/ (written
// there create-only, then removed from inbox/ if unchanged since), never
// deleted. It also finishes moves a crashed run left half done, and offers
// each pending entry not due that names no job to Config.Dispatch again
// (as DispatchPending does; a failure is logged). Only the system actor
// expires. It returns the ids it moved.
func (b *Box) ExpireDue(ctx context.Context, actor lifecycle.Actor) ([]string, error) {
	if actor != lifecycle.ActorSystem {
		return nil, forbidden(lifecycle.InboxExpired, machine.EventInboxExpire, actor, lifecycle.ActorSystem)
	}
	var moved []string
	for key, err := range b.keys(ctx, false) {
		if err != nil {
			return moved, err
		}
		id, ok := layout.ParseInboxKey(key)
		if !ok {
			continue
		}
		d, ver, err := b.read(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return moved, err
		}
		if d.Status == lifecycle.InboxPending && b.cfg.Clock.Now().Before(d.Expires()) {
			// Not due: the retry of a dispatch that failed, in this same
			// listing rather than a second one (DispatchPending's work).
			b.dispatch(ctx, d.InboxEntry)
			continue
		}
		if d.Status == lifecycle.InboxPending {
			rec := &fence.Record[entryDoc, *entryDoc]{Store: b.cfg.Store, Key: key}
			_, d, err = rec.Apply(ctx, func(d *entryDoc) error {
				if d.Status != lifecycle.InboxPending || b.cfg.Clock.Now().Before(d.Expires()) {
					return errSkip
				}
				_, err := machine.InboxMachine().Fire(ctx, &d.InboxEntry, machine.EventInboxExpire, actor)
				return err
			})
			if errors.Is(err, errSkip) || errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				return moved, err
			}
			_, ver = rec.Snapshot()
			b.record(ctx, actor, &d.InboxEntry, lifecycle.InboxPending)
		}
		if d.Status != lifecycle.InboxExpired {
			continue
		}
		ek, _ := layout.InboxExpiredKey(id)
		if _, err := records.Create(ctx, b.cfg.Store, ek, &d); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return moved, err
		}
		if err := b.cfg.Store.Delete(ctx, key, storage.IfMatch(ver)); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return moved, err
		}
		moved = append(moved, id)
	}
	return moved, nil
}

var errSkip = errors.New("skip")

// ListOptions filter List.
type ListOptions struct {
	// Status, when set, yields only entries in that state.
	Status lifecycle.InboxState
	// IncludeExpired yields expired entries too; they are hidden by default
	// (docs/spec.md#inbox-entry-lifecycle). Status Expired implies it.
	IncludeExpired bool
}

// List yields entries in the order of their keys (inbox/ and, when asked
// for, inbox/expired/), for GET /inbox/entries?status=.
func (b *Box) List(ctx context.Context, opts ListOptions) iter.Seq2[lifecycle.InboxEntry, error] {
	return func(yield func(lifecycle.InboxEntry, error) bool) {
		if err := opts.check(); err != nil {
			yield(lifecycle.InboxEntry{}, err)
			return
		}
		withExpired := opts.IncludeExpired || opts.Status == lifecycle.InboxExpired
		for key, err := range b.keys(ctx, withExpired) {
			if err != nil {
				yield(lifecycle.InboxEntry{}, err)
				return
			}
			e, ok, err := b.entryAt(ctx, key, opts)
			if err != nil {
				yield(lifecycle.InboxEntry{}, err)
				return
			}
			if ok && !yield(e, nil) {
				return
			}
		}
	}
}

// keys lists the inbox's keys in order; without expired, it steps over
// inbox/expired/ in one jump instead of listing it, so what the expiry
// pass and the lists of live entries cost does not grow with the expired
// entries kept ('0' is the byte after '/': no live key sorts between).
func (b *Box) keys(ctx context.Context, expired bool) iter.Seq2[string, error] {
	if expired {
		return b.cfg.Store.List(ctx, layout.InboxPrefix)
	}
	return func(yield func(string, error) bool) {
		for key, err := range b.cfg.Store.List(ctx, layout.InboxPrefix) {
			if err != nil || !layout.IsInboxExpiredKey(key) {
				if !yield(key, err) || err != nil {
					return
				}
				continue
			}
			for key, err := range b.cfg.Store.ListAfter(ctx, layout.InboxPrefix, strings.TrimSuffix(layout.InboxExpiredPrefix, "/")+"0") {
				if !yield(key, err) || err != nil {
					return
				}
			}
			return
		}
	}
}

func (opts ListOptions) check() error {
	if opts.Status != "" && !machine.InboxMachine().IsState(opts.Status) {
		return invalid("status", "%q is not pending, processed, rejected or expired", opts.Status)
	}
	return nil
}

// entryAt reads the entry at a key of the inbox's listing and tells
// whether opts lists it.
func (b *Box) entryAt(ctx context.Context, key string, opts ListOptions) (lifecycle.InboxEntry, bool, error) {
	withExpired := opts.IncludeExpired || opts.Status == lifecycle.InboxExpired
	id, live := layout.ParseInboxKey(key)
	expired := layout.IsInboxExpiredKey(key)
	if (!live && !expired) || (expired && !withExpired) {
		return lifecycle.InboxEntry{}, false, nil
	}
	d, _, err := b.read(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return lifecycle.InboxEntry{}, false, nil
	}
	if err != nil {
		return lifecycle.InboxEntry{}, false, err
	}
	if live && d.Status == lifecycle.InboxExpired {
		// Moving: shown from inbox/expired/ once it is there.
		ek, _ := layout.InboxExpiredKey(id)
		if _, _, err := b.cfg.Store.Get(ctx, ek); err == nil || !withExpired {
			return lifecycle.InboxEntry{}, false, nil
		}
	}
	return d.InboxEntry, tenancy.Sees(ctx, d.TenantID) && (opts.Status == "" || d.Status == opts.Status), nil
}

// EntryPage is a page of inbox entries, in key order.
type EntryPage struct {
	Entries []lifecycle.InboxEntry
	// Next is the cursor of the next page, "" on the last page.
	Next string
}

// ListPage reads a page of the entries List yields, from cursor ("" for
// the first page; else a Next), at most limit (0: 50;
// more than 500 is refused). The status filter is checked
// on each entry read, at most max(4*limit, 200) a page: a page of a rare
// status may come back short, with a Next.
func (b *Box) ListPage(ctx context.Context, opts ListOptions, limit int, cursor string) (EntryPage, error) {
	if err := opts.check(); err != nil {
		return EntryPage{}, err
	}
	limit, err := paging.Limit(limit)
	if err != nil {
		return EntryPage{}, err
	}
	after, err := paging.Cursor(cursor, func(e string) bool {
		k := layout.InboxPrefix + e
		_, live := layout.ParseInboxKey(k)
		return live || layout.IsInboxExpiredKey(k)
	})
	if err != nil {
		return EntryPage{}, err
	}
	entries, next, err := paging.Read(ctx, b.cfg.Store, []string{layout.InboxPrefix}, after, limit, max(4*limit, 200),
		func(ctx context.Context, _ int, entry string) (lifecycle.InboxEntry, bool, error) {
			return b.entryAt(ctx, layout.InboxPrefix+entry, opts)
		})
	if err != nil {
		return EntryPage{}, err
	}
	return EntryPage{Entries: entries, Next: next}, nil
}

// Stats counts every entry, expired ones included.
func (b *Box) Stats(ctx context.Context) (lifecycle.InboxStats, error) {
	var s lifecycle.InboxStats
	for e, err := range b.List(ctx, ListOptions{IncludeExpired: true}) {
		if err != nil {
			return s, err
		}
		switch e.Status {
		case lifecycle.InboxPending:
			s.Pending++
		case lifecycle.InboxProcessed:
			s.Processed++
		case lifecycle.InboxRejected:
			s.Rejected++
		case lifecycle.InboxExpired:
			s.Expired++
		}
		s.Total++
	}
	return s, nil
}
