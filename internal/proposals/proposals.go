// Package proposals keeps the proposals runs create (docs/spec.md#proposal):
// a record each at proposals/{id}.json, and an index of the pending ones,
// newest first, which a proposal leaves when the gateway applies or rejects
// it. Every write is checked against the Memory Backend's authority table:
// a step creates a proposal (Mastra's "via proposal"), only the gateway
// decides one.
package proposals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// SchemaVersion is the layout of the records this release writes.
const SchemaVersion = 1

// The audit events of proposals.
const (
	EventCreate       = "proposal.create"
	EventStatusUpdate = "proposal.status.update"
)

// doc is the stored form of a proposal.
type doc struct {
	lifecycle.Meta

	lifecycle.Proposal
}

// Store reads and writes proposals over a storage.Store. It is safe for
// concurrent use, also across processes.
type Store struct {
	s     *storage.Store
	now   func() time.Time
	audit *records.AuditLog
	log   *slog.Logger
}

// New returns a Store over s; a nil now is the wall clock's, a nil log
// slog.Default(). node names this host in audit events.
func New(s *storage.Store, now func() time.Time, node string, log *slog.Logger) *Store {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Store{s: s, now: now, log: log, audit: &records.AuditLog{Store: s, Node: node, Now: now}}
}

// ConflictError refuses a move from a state that is not pending: a
// proposal is decided once. Its code is CONFLICT (409).
type ConflictError struct {
	ID     string
	Status lifecycle.ProposalState
}

// Error names the proposal and its state.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("proposal %s is %s already: a proposal is applied or rejected once", e.ID, e.Status)
}

// Code is CONFLICT.
func (e *ConflictError) Code() string { return codes.Conflict }

// InvalidError refuses a proposal or a decision that breaks a rule. Its
// code is INVALID_REQUEST (400).
type InvalidError struct{ Field, Reason string }

// Error names the field.
func (e *InvalidError) Error() string { return "proposal: invalid " + e.Field + ": " + e.Reason }

// Code is INVALID_REQUEST.
func (e *InvalidError) Code() string { return codes.InvalidRequest }

// Create records p as a pending proposal created by actor, who must be
// allowed to write memory through a proposal (Mastra, or the gateway).
// p needs ID, RunID, AgentSlug and ContentKey; the Store sets the schema
// version, the status and the creation time. The record is create-only:
// creating one that exists for the same run and content (a step run
// again) returns the existing record; for another, a CONFLICT.
func (st *Store) Create(ctx context.Context, actor lifecycle.Actor, p lifecycle.Proposal) (lifecycle.Proposal, error) {
	if err := authority.Check(actor, authority.Memory, authority.Write, authority.Scope{Proposal: true}); err != nil {
		return lifecycle.Proposal{}, err
	}
	for _, f := range [][2]string{{"proposal id", p.ID}, {"run id", p.RunID}, {"slug", p.AgentSlug}} {
		if err := storekey.ValidateID(f[0], f[1]); err != nil {
			return lifecycle.Proposal{}, &InvalidError{Field: f[0], Reason: err.Error()}
		}
	}
	if p.ContentKey == "" {
		return lifecycle.Proposal{}, &InvalidError{Field: "content_key", Reason: "required"}
	}
	key, _ := layout.ProposalKey(p.ID)
	p.SchemaVersion, p.Status, p.CreatedAt = SchemaVersion, lifecycle.ProposalPending, st.now().UTC()
	p.DecidedAt, p.DecidedBy, p.Reason = nil, "", ""
	// The index entry first: a crash before the record leaves an entry
	// whose record is missing, which readers skip; the other order would
	// leave a pending proposal no list shows.
	entry, err := layout.ProposalPendingKey(p.CreatedAt, p.ID)
	if err != nil {
		return lifecycle.Proposal{}, err
	}
	if st.s.SettleTime() > 0 {
		// A store that settles may take the create-only write below over
		// an existing record (and send a decided one back to pending).
		if old, err := st.Get(ctx, p.ID); err == nil {
			return st.existing(old, p)
		} else if !errors.Is(err, storage.ErrNotFound) {
			return lifecycle.Proposal{}, err
		}
	}
	if _, err := st.s.Put(ctx, entry, []byte("{}"), storage.IfNotExists()); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return lifecycle.Proposal{}, err
	}
	d := doc{Proposal: p}
	if _, err := records.Create(ctx, st.s, key, &d); err != nil {
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return lifecycle.Proposal{}, err
		}
		old, gerr := st.Get(ctx, p.ID)
		if gerr != nil {
			return lifecycle.Proposal{}, gerr
		}
		if own, _ := layout.ProposalPendingKey(old.CreatedAt, old.ID); own != entry {
			_ = st.s.Delete(ctx, entry, storage.Condition{}) // this attempt's entry; the record keeps its own
		}
		return st.existing(old, p)
	}
	st.record(ctx, actor, &d.Proposal, "")
	return d.Proposal, nil
}

// existing answers a create of p that found old under its id: old itself
// when it is the same proposal (a step run again), else a conflict.
func (st *Store) existing(old, p lifecycle.Proposal) (lifecycle.Proposal, error) {
	if old.RunID != p.RunID || old.ContentKey != p.ContentKey {
		return lifecycle.Proposal{}, &ConflictError{ID: p.ID, Status: old.Status}
	}
	return old, nil
}

func (st *Store) record(ctx context.Context, actor lifecycle.Actor, p *lifecycle.Proposal, from lifecycle.ProposalState) {
	ev := lifecycle.AuditEvent{Event: EventStatusUpdate, Actor: string(actor), RunID: p.RunID, ProposalID: p.ID, TenantID: p.TenantID, From: string(from), To: string(p.Status)}
	if from == "" {
		ev.Event = EventCreate
	}
	if _, err := st.audit.Record(ctx, ev); err != nil {
		st.log.ErrorContext(ctx, "proposals: audit write failed", "proposal_id", p.ID, "to", p.Status, "err", err)
	}
}

// Get returns a proposal; a missing one matches storage.ErrNotFound.
func (st *Store) Get(ctx context.Context, id string) (lifecycle.Proposal, error) {
	key, err := layout.ProposalKey(id)
	if err != nil {
		return lifecycle.Proposal{}, &InvalidError{Field: "proposal id", Reason: err.Error()}
	}
	d, _, err := records.Read[doc](ctx, st.s, key)
	if err == nil && !tenancy.Sees(ctx, d.TenantID) {
		// Another tenant's answers as missing, word for word.
		return lifecycle.Proposal{}, &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound}
	}
	return d.Proposal, err
}

// Decide moves a pending proposal to applied or rejected, as actor, who
// must be allowed to write memory itself (the gateway, the platform's
// Apply Engine). reason is optional prose (at most 4,096 bytes). A
// proposal decided already is a *ConflictError; a missing one matches
// storage.ErrNotFound.
func (st *Store) Decide(ctx context.Context, actor lifecycle.Actor, id string, to lifecycle.ProposalState, reason string) (lifecycle.Proposal, error) {
	if err := authority.Check(actor, authority.Memory, authority.Write, authority.Scope{}); err != nil {
		return lifecycle.Proposal{}, err
	}
	if to != lifecycle.ProposalApplied && to != lifecycle.ProposalRejected {
		return lifecycle.Proposal{}, &InvalidError{Field: "status", Reason: fmt.Sprintf("%q is not applied or rejected", to)}
	}
	if reason != "" {
		if err := codes.CheckText("reason", reason, codes.MaxTextBytes, codes.MultiLine); err != nil {
			return lifecycle.Proposal{}, err
		}
	}
	key, err := layout.ProposalKey(id)
	if err != nil {
		return lifecycle.Proposal{}, &InvalidError{Field: "proposal id", Reason: err.Error()}
	}
	now := st.now().UTC()
	if _, err := st.Get(ctx, id); err != nil {
		return lifecycle.Proposal{}, err // missing, or another tenant's
	}
	_, after, err := (&fence.Record[doc, *doc]{Store: st.s, Key: key}).Apply(ctx, func(d *doc) error {
		if d.Status != lifecycle.ProposalPending {
			return &ConflictError{ID: id, Status: d.Status}
		}
		d.Status, d.DecidedAt, d.DecidedBy, d.Reason = to, &now, actor, reason
		return nil
	})
	if err != nil {
		return lifecycle.Proposal{}, err
	}
	// The record moved first; a crash before this delete leaves an entry
	// readers skip (its record is no longer pending).
	if entry, err := layout.ProposalPendingKey(after.CreatedAt, id); err == nil {
		if err := st.s.Delete(ctx, entry, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
			st.log.WarnContext(ctx, "proposals: pending index entry not removed", "proposal_id", id, "err", err)
		}
	}
	st.record(ctx, actor, &after.Proposal, lifecycle.ProposalPending)
	return after.Proposal, nil
}

// Pending reads a page of the pending proposals, newest first, from
// cursor ("" for the first page) with at most limit (0: 50; over 500 is
// refused). next is the cursor of the following page, "" after the last.
// The index holds every tenant's: a page reads at most max(4·limit, 200)
// entries, so a tenant among many others' proposals may get a short page,
// even an empty one, with a next cursor, not a read of them all.
func (st *Store) Pending(ctx context.Context, limit int, cursor string) (page []lifecycle.Proposal, next string, err error) {
	limit, err = paging.Limit(limit)
	if err != nil {
		return nil, "", err
	}
	after, err := paging.Cursor(cursor, func(e string) bool { _, ok := layout.ParseProposalPendingEntry(e); return ok })
	if err != nil {
		return nil, "", err
	}
	return paging.Read(ctx, st.s, []string{layout.ProposalsPendingIndex}, after, limit, max(4*limit, 200),
		func(ctx context.Context, _ int, entry string) (lifecycle.Proposal, bool, error) {
			id, ok := layout.ParseProposalPendingEntry(entry)
			if !ok {
				return lifecycle.Proposal{}, false, nil
			}
			p, err := st.Get(ctx, id)
			var qe *lifecycle.QuarantinedError
			if errors.Is(err, storage.ErrNotFound) || errors.As(err, &qe) {
				return lifecycle.Proposal{}, false, nil
			}
			if err != nil {
				return lifecycle.Proposal{}, false, err
			}
			// An entry of an earlier attempt, or of a proposal decided
			// since, no longer matches its record.
			want, _ := layout.NewestFirst(p.CreatedAt, p.ID)
			return p, p.Status == lifecycle.ProposalPending && want == entry, nil
		})
}
