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

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// DefaultTTL is an entry's lifetime while pending unless it says otherwise
// (seed 002 §1.3 ttl_hours: default 72).
const DefaultTTL = 72 * time.Hour

// MaxTTLHours bounds metadata.ttl_hours: one year.
const MaxTTLHours = 24 * 366

// Config configures a Box.
type Config struct {
	// Store holds the entries and the audit log. Required.
	Store storage.Store
	// Clock stamps created_at and decides expiry. Default: the wall clock.
	Clock clock.Clock
	// Node names this host in audit events. Default: "".
	Node string
	// DefaultTTL is the lifetime of entries submitted without ttl_hours; it
	// is rounded up to whole hours. Default: DefaultTTL (72 h).
	DefaultTTL time.Duration
	// Logger receives audit write failures. Default: slog.Default().
	Logger *slog.Logger
}

// Box is the inbox of seed 002 §1 over a Store: entries live at
// inbox/{id}.json while pending, processed or rejected, and move to
// inbox/expired/{id}.json when their TTL runs out; nothing is ever deleted
// for good. It is safe for concurrent use, also across processes.
type Box struct {
	cfg   Config
	ttlH  int
	audit *storage.AuditLog
	quar  *core.Quarantiner
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
		cfg.DefaultTTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := int((cfg.DefaultTTL + time.Hour - 1) / time.Hour)
	if h > MaxTTLHours {
		return nil, fmt.Errorf("inbox: DefaultTTL %s is longer than %d hours", cfg.DefaultTTL, MaxTTLHours)
	}
	return &Box{cfg: cfg, ttlH: h, audit: &storage.AuditLog{Store: cfg.Store, Node: cfg.Node, Now: cfg.Clock.Now},
		quar: &core.Quarantiner{Store: cfg.Store, Clock: cfg.Clock, Log: cfg.Logger}}, nil
}

// read reads an entry. One that cannot be decoded is quarantined and reads
// as missing (ErrNotFound), so a poison entry never stops a listing, the
// stats or the expiry pass.
func (b *Box) read(ctx context.Context, key string) (entryDoc, storage.Version, error) {
	d, v, err := storage.Read[entryDoc](ctx, b.cfg.Store, key)
	var ce *storage.CorruptError
	if errors.As(err, &ce) {
		if _, qerr := b.quar.Move(ctx, ce); qerr != nil && !errors.Is(qerr, storage.ErrPreconditionFailed) {
			return d, v, qerr
		}
		return d, v, fmt.Errorf("inbox: %w (quarantined): %w", storage.ErrNotFound, err)
	}
	return d, v, err
}

// Errors of the inbox, each with a code of lifecycle's one table
// (lifecycle.ErrorCode, lifecycle.HTTPStatus):
//
//   - bad input matches ErrInvalidEntry: a *ValidationError, INVALID_INPUT
//     (400) or INPUT_TOO_LARGE (413) for text, INVALID_REQUEST (400) for the
//     other rules;
//   - an id in use matches ErrEntryExists: INBOX_ENTRY_EXISTS (409);
//   - a missing entry matches ErrNotFound: NOT_FOUND (404);
//   - a move the machine does not allow matches
//     lifecycle.ErrInvalidTransition: INBOX_ENTRY_EXPIRED (410) from an
//     expired entry, INBOX_INVALID_TRANSITION (409) otherwise;
//   - a refused actor matches lifecycle.ErrForbiddenActor: FORBIDDEN (403).
var (
	ErrInvalidEntry       = errors.New("inbox: invalid entry")
	ErrEntryExists  error = &codedError{err: errors.New("inbox: entry already exists"), code: lifecycle.CodeInboxEntryExists}
	// ErrNotFound matches a missing entry (and storage.ErrNotFound).
	ErrNotFound = storage.ErrNotFound
)

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
	if ite.From == string(Expired) {
		return &codedError{err: err, code: lifecycle.CodeInboxEntryExpired}
	}
	return &codedError{err: err, code: lifecycle.CodeInboxInvalidTransition}
}

// ValidationError says which field of a submission is wrong. It matches
// ErrInvalidEntry, and a *lifecycle.InputError when the field's text broke
// its limit or was not clean.
type ValidationError struct {
	Field  string
	Reason string
	// Err is the *lifecycle.InputError of a text field, or nil.
	Err error
}

// Error renders the field and the reason.
func (e *ValidationError) Error() string { return "inbox: invalid " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidEntry and Err, if set.
func (e *ValidationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidEntry}
	}
	return []error{ErrInvalidEntry, e.Err}
}

// Code is that of Err (INVALID_INPUT or INPUT_TOO_LARGE) for a text field,
// else INVALID_REQUEST.
func (e *ValidationError) Code() string {
	if e.Err != nil {
		return lifecycle.ErrorCode(e.Err)
	}
	return lifecycle.CodeInvalidRequest
}

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Submission is the body of POST /inbox/submit: an entry before the
// validation gate. ID may be empty (a fresh id is drawn); status,
// created_at and the outcome fields are the Box's to set.
type Submission struct {
	ID       string   `json:"id,omitempty"`
	Source   Source   `json:"source"`
	Intent   Intent   `json:"intent"`
	Metadata Metadata `json:"metadata"`
}

// DecodeSubmission decodes a submission from JSON, refusing unknown fields
// and trailing data, and validates it (see Submission.Validate).
func DecodeSubmission(data []byte) (Submission, error) {
	var s Submission
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Submission{}, invalid("body", "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Submission{}, invalid("body", "trailing data after the JSON object")
	}
	return s, s.Validate()
}

var sourceTypes = []string{"ui", "telegram", "webhook", "agent", "cron"}

// text checks a text field with lifecycle's one input check (limits shared
// with the rest of the SDK); required refuses the empty string.
func text(field, s string, limit int, kind lifecycle.TextKind, required bool) error {
	if s == "" && required {
		return invalid(field, "empty")
	}
	err := lifecycle.CheckText(field, s, limit, kind)
	if ie := (*lifecycle.InputError)(nil); errors.As(err, &ie) {
		return &ValidationError{Field: field, Reason: ie.Reason, Err: err}
	}
	return err
}

// Validate is the validation gate at submission (seed 002 §1.2 "→ pending"):
//
//   - id, if set, is a valid storage id;
//   - source.type is one of ui, telegram, webhook, agent, cron, and
//     source.identity is set (at most lifecycle.MaxNameBytes, 256);
//   - intent.action is set, lower-case letters, digits and "-" (at most 64
//     bytes), and intent.target is set (at most lifecycle.MaxRefBytes, 1 KiB);
//   - metadata.priority is "normal" (the default when empty) or "high";
//     metadata.ttl_hours is 0 (the Box's default) or 1..MaxTTLHours;
//     metadata.correlation_id has at most lifecycle.MaxNameBytes.
//
// Text fields must be one line of UTF-8 without control characters
// (lifecycle.CheckText). Errors match ErrInvalidEntry and name the field.
func (s *Submission) Validate() error {
	// The fields of a fixed set are text too: invalid UTF-8 in one is
	// INVALID_INPUT, as in any other field, before its value is judged.
	for _, f := range []struct{ name, v string }{{"source.type", s.Source.Type}, {"intent.action", s.Intent.Action}, {"metadata.priority", s.Metadata.Priority}} {
		if err := text(f.name, f.v, lifecycle.MaxNameBytes, lifecycle.OneLine, false); err != nil {
			return err
		}
	}
	if s.ID != "" {
		if err := storage.ValidateID("inbox entry id", s.ID); err != nil {
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
	if err := text("source.identity", s.Source.Identity, lifecycle.MaxNameBytes, lifecycle.OneLine, true); err != nil {
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
	if err := text("intent.target", s.Intent.Target, lifecycle.MaxRefBytes, lifecycle.OneLine, true); err != nil {
		return err
	}
	if s.Metadata.Priority != "" && s.Metadata.Priority != "normal" && s.Metadata.Priority != "high" {
		return invalid("metadata.priority", "%q is not normal or high", s.Metadata.Priority)
	}
	if s.Metadata.TTLHours < 0 || s.Metadata.TTLHours > MaxTTLHours {
		return invalid("metadata.ttl_hours", "%d is outside 1..%d", s.Metadata.TTLHours, MaxTTLHours)
	}
	return text("metadata.correlation_id", s.Metadata.CorrelationID, lifecycle.MaxNameBytes, lifecycle.OneLine, false)
}

// entryDoc is the stored form of an Entry.
type entryDoc struct {
	storage.Meta
	Entry
}

func newEntryID(now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "inbox_" + now.UTC().Format("2006-01-02") + "_" + hex.EncodeToString(b[:])
}

// forbidden refuses a write by an actor the inbox machine does not list.
func forbidden(to State, event lifecycle.Event, actor lifecycle.Actor, allowed lifecycle.Actor) error {
	return &lifecycle.ForbiddenActorError{Machine: Machine().Name(), To: string(to), Event: string(event),
		Actor: actor, Allowed: []lifecycle.Actor{allowed}}
}

// Submit passes sub through the validation gate and stores it as a pending
// entry. Only the gateway (the seed's Worker) submits. Bad input
// (ErrInvalidEntry), a refused actor (FORBIDDEN) or an id in use
// (ErrEntryExists) writes nothing.
func (b *Box) Submit(ctx context.Context, actor lifecycle.Actor, sub Submission) (Entry, error) {
	if actor != lifecycle.ActorGateway {
		return Entry{}, forbidden(Pending, "submit", actor, lifecycle.ActorGateway)
	}
	if err := sub.Validate(); err != nil {
		return Entry{}, err
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
	key, err := storage.InboxKey(sub.ID)
	if err != nil {
		return Entry{}, err
	}
	expiredKey, _ := storage.InboxExpiredKey(sub.ID)
	if _, _, err := b.cfg.Store.Get(ctx, expiredKey); err == nil {
		return Entry{}, fmt.Errorf("%w: %s (expired)", ErrEntryExists, sub.ID)
	} else if !errors.Is(err, storage.ErrNotFound) {
		return Entry{}, err
	}
	doc := entryDoc{Entry: Entry{ID: sub.ID, Source: sub.Source, Intent: sub.Intent, Metadata: sub.Metadata,
		Status: Pending, CreatedAt: now}}
	if _, err := storage.Create(ctx, b.cfg.Store, key, &doc); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return Entry{}, fmt.Errorf("%w: %s", ErrEntryExists, sub.ID)
		}
		return Entry{}, err
	}
	b.record(ctx, actor, doc.ID, "", Pending)
	return doc.Entry, nil
}

func (b *Box) record(ctx context.Context, actor lifecycle.Actor, id string, from, to State) {
	ev := storage.AuditEvent{Event: "inbox.status.update", Actor: string(actor), EntryID: id, From: string(from), To: string(to)}
	if from == "" {
		ev.Event = "inbox.create"
	}
	if _, err := b.audit.Record(ctx, ev); err != nil {
		b.cfg.Logger.ErrorContext(ctx, "inbox: audit write failed", "entry_id", id, "to", to, "err", err)
	}
}

// move fires event on the live entry id as actor, with set applied after.
func (b *Box) move(ctx context.Context, actor lifecycle.Actor, id string, event lifecycle.Event, set func(*Entry)) (Entry, error) {
	key, err := storage.InboxKey(id)
	if err != nil {
		return Entry{}, err
	}
	var from State
	_, d, err := (&core.Record[entryDoc, *entryDoc]{Store: b.cfg.Store, Key: key}).Apply(ctx, func(d *entryDoc) error {
		from = d.Status
		if _, err := Machine().Fire(ctx, &d.Entry, event, actor); err != nil {
			return transitionError(err)
		}
		if set != nil {
			set(&d.Entry)
		}
		return nil
	})
	if errors.Is(err, storage.ErrNotFound) {
		// An expired entry has moved; report it as the terminal state it is.
		if e, gerr := b.Get(ctx, id); gerr == nil {
			_, err = Machine().Fire(ctx, &e, event, actor)
			return Entry{}, transitionError(err)
		}
	}
	if err != nil {
		return Entry{}, err
	}
	b.record(ctx, actor, id, from, d.Status)
	return d.Entry, nil
}

// Process records that the validation gate passed and the entry became
// proposal proposalID: pending → processed. Only the gateway processes.
func (b *Box) Process(ctx context.Context, actor lifecycle.Actor, id, proposalID string) (Entry, error) {
	if err := storage.ValidateID("proposal id", proposalID); err != nil {
		return Entry{}, invalid("proposal_id", "%v", err)
	}
	return b.move(ctx, actor, id, EventProcess, func(e *Entry) { e.ProposalID = proposalID })
}

// Reject records that the validation gate refused the entry: pending →
// rejected, with the reason (1 byte to lifecycle.MaxTextBytes, may span
// lines, as every reason in the SDK). Only the gateway rejects.
func (b *Box) Reject(ctx context.Context, actor lifecycle.Actor, id, reason string) (Entry, error) {
	if err := text("rejection_reason", reason, lifecycle.MaxTextBytes, lifecycle.MultiLine, true); err != nil {
		return Entry{}, err
	}
	return b.move(ctx, actor, id, EventReject, func(e *Entry) { e.RejectionReason = reason })
}

// Get returns an entry, live or expired.
func (b *Box) Get(ctx context.Context, id string) (Entry, error) {
	key, err := storage.InboxKey(id)
	if err != nil {
		return Entry{}, err
	}
	d, _, err := b.read(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		ek, _ := storage.InboxExpiredKey(id)
		d, _, err = b.read(ctx, ek)
	}
	return d.Entry, err
}

// Expires tells when e's TTL runs out.
func (e *Entry) Expires() time.Time {
	return e.CreatedAt.Add(time.Duration(e.Metadata.TTLHours) * time.Hour)
}

const (
	livePrefix    = "inbox/"
	expiredPrefix = "inbox/expired/"
)

// liveID returns the id of a live entry key inbox/{id}.json.
func liveID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, livePrefix)
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	return strings.CutSuffix(rest, ".json")
}

// ExpireDue is the cron of seed 002 §1.2: every pending entry whose TTL
// has run out goes pending → expired and moves to inbox/expired/ (written
// there create-only, then removed from inbox/ if unchanged since), never
// deleted. It also finishes moves a crashed run left half done. Only the
// system actor expires. It returns the ids it moved.
func (b *Box) ExpireDue(ctx context.Context, actor lifecycle.Actor) ([]string, error) {
	if actor != lifecycle.ActorSystem {
		return nil, forbidden(Expired, EventExpire, actor, lifecycle.ActorSystem)
	}
	var moved []string
	for key, err := range b.cfg.Store.List(ctx, livePrefix) {
		if err != nil {
			return moved, err
		}
		id, ok := liveID(key)
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
		if d.Status == Pending && !b.cfg.Clock.Now().Before(d.Expires()) {
			rec := &core.Record[entryDoc, *entryDoc]{Store: b.cfg.Store, Key: key}
			_, d, err = rec.Apply(ctx, func(d *entryDoc) error {
				if d.Status != Pending || b.cfg.Clock.Now().Before(d.Expires()) {
					return errSkip
				}
				_, err := Machine().Fire(ctx, &d.Entry, EventExpire, actor)
				return err
			})
			if errors.Is(err, errSkip) || errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				return moved, err
			}
			_, ver = rec.Snapshot()
			b.record(ctx, actor, id, Pending, Expired)
		}
		if d.Status != Expired {
			continue
		}
		ek, _ := storage.InboxExpiredKey(id)
		if _, err := storage.Create(ctx, b.cfg.Store, ek, &d); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
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
	Status State
	// IncludeExpired yields expired entries too; they are hidden by default
	// (seed 002 §1.4). Status Expired implies it.
	IncludeExpired bool
}

// List yields entries in the order of their keys (inbox/ and, when asked
// for, inbox/expired/), for GET /inbox/entries?status=.
func (b *Box) List(ctx context.Context, opts ListOptions) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		if opts.Status != "" && !Machine().IsState(opts.Status) {
			yield(Entry{}, invalid("status", "%q is not pending, processed, rejected or expired", opts.Status))
			return
		}
		withExpired := opts.IncludeExpired || opts.Status == Expired
		want := func(e *Entry) bool { return opts.Status == "" || e.Status == opts.Status }
		for key, err := range b.cfg.Store.List(ctx, livePrefix) {
			if err != nil {
				yield(Entry{}, err)
				return
			}
			id, live := liveID(key)
			expired := strings.HasPrefix(key, expiredPrefix)
			if !live && !expired {
				continue
			}
			if expired && !withExpired {
				continue
			}
			d, _, err := b.read(ctx, key)
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				yield(Entry{}, err)
				return
			}
			if live && d.Status == Expired {
				// Moving: shown from inbox/expired/ once it is there.
				ek, _ := storage.InboxExpiredKey(id)
				if _, _, err := b.cfg.Store.Get(ctx, ek); err == nil || !withExpired {
					continue
				}
			}
			if want(&d.Entry) && !yield(d.Entry, nil) {
				return
			}
		}
	}
}

// Stats counts entries by state (GET /inbox/stats).
type Stats struct {
	Pending   int `json:"pending"`
	Processed int `json:"processed"`
	Rejected  int `json:"rejected"`
	Expired   int `json:"expired"`
	Total     int `json:"total"`
}

// Stats counts every entry, expired ones included.
func (b *Box) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	for e, err := range b.List(ctx, ListOptions{IncludeExpired: true}) {
		if err != nil {
			return s, err
		}
		switch e.Status {
		case Pending:
			s.Pending++
		case Processed:
			s.Processed++
		case Rejected:
			s.Rejected++
		case Expired:
			s.Expired++
		}
		s.Total++
	}
	return s, nil
}
