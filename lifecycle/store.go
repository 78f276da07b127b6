package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Meta is embedded in every typed document. It carries the document's own
// version counter inside the JSON ("version": 1 on create, +1 per write of
// the engines' fenced read-check-write), so a reader of the raw object sees
// how many writes it has had, independent of the store's opaque version.
// (An artifact's "version": 1 is this field, docs/spec.md#artifact.)
type Meta struct {
	Version int64 `json:"version"`
	// Unknown holds the top-level members of the stored record that this
	// release does not know (a newer release's), as they were read, so that
	// the SDK's next rewrite of the record writes them back unchanged: no
	// process drops fields it does not know (docs/stores.md, "Upgrades").
	// It is empty for a record with none and for a record being created,
	// and is never encoded as a member of its own.
	Unknown string `json:"-"`
}

// StorageMeta gives the SDK's typed-document functions the embedded Meta.
func (m *Meta) StorageMeta() *Meta { return m }

// Lease says which process owns a record (a run, a job) and until when
// (docs/spec.md#recovery). The owner renews it by heartbeat; another process takes the
// record over only after ExpiresAt, with Epoch+1, and every write of an owner
// is conditional on its own (Owner, Epoch) still being in the record, so a
// process that was paused past its lease can write nothing once it wakes.
type Lease struct {
	Owner     string    `json:"owner"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	// Slot is, for a job, which of its lane's locks the lease was taken
	// under (a job type's lane may run several jobs at once, each under a
	// lock of its own; an agent's has one, slot 0). Omitted when 0.
	Slot int `json:"slot,omitempty"`
}

// ErrLeaseLost is matched by every error an owner gets once it no longer
// holds the lease it wrote under: another process took the record over
// (a higher epoch) or the lease lapsed. It is the one such sentinel of the
// whole SDK; runs, jobs and NLM jobs all report it. A writer that gets it
// must stop: none of its later writes land.
var ErrLeaseLost = errors.New("conveyor: lease lost")

// LeaseLostError says which record a writer lost and who holds it now.
type LeaseLostError struct {
	// Key is the record's key.
	Key string
	// Owner and Epoch are the lease the writer held.
	Owner string
	Epoch int64
	// Holder and HolderEpoch are the lease found in the record (empty when
	// none); Expired is set when the writer's own lease was found lapsed.
	Holder      string
	HolderEpoch int64
	Expired     bool
}

// Error names the record, the lost epoch and the lease now in the record.
func (e *LeaseLostError) Error() string {
	if e.Expired {
		return fmt.Sprintf("conveyor: %s: lease of %q at epoch %d lapsed", e.Key, e.Owner, e.Epoch)
	}
	return fmt.Sprintf("conveyor: %s: lease of %q at epoch %d lost (now held by %q at epoch %d)",
		e.Key, e.Owner, e.Epoch, e.Holder, e.HolderEpoch)
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Code is RUN_LEASE_LOST.
func (e *LeaseLostError) Code() string { return codeLeaseLost }

// ErrCorrupt is matched by the error of a record that cannot be decoded or
// fails validation: a poison record. Engines never block on one: they move
// it under quarantine/ and go on with everything else.
var ErrCorrupt = errors.New("storage: corrupt record")

// QuarantinedError describes a poison record (one that does not decode or
// fails validation): where it was, the version it was read at, its bytes,
// why it was refused, and, once it was moved under quarantine/, where its
// copy is kept. It is the one such error of the SDK: a read that finds a
// poison record, and a run or job whose record is in quarantine, report
// it (an operator may repair and restore the record, after which the
// engines take it up again). It matches [ErrCorrupt]; its code is
// RECORD_QUARANTINED (HTTP 410).
type QuarantinedError struct {
	// ID is the id of the run or job whose record it is, when it is one.
	ID string
	// Key is where the record was; QKey where its copy is kept (empty
	// before it is moved).
	Key, QKey string
	// Version is the store's version of the record as it was read.
	Version string
	Data    []byte
	Reason  string
	Err     error // the decoder's or validator's error, if any
}

// Error names the key, the reason and where the copy is.
func (e *QuarantinedError) Error() string {
	msg := "storage: corrupt record " + e.Key + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + trimStorage(e.Err.Error())
	}
	if e.QKey != "" {
		msg += " (quarantined at " + e.QKey + ")"
	}
	return msg
}

// Is matches ErrCorrupt.
func (e *QuarantinedError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the decoder's or validator's error.
func (e *QuarantinedError) Unwrap() error { return e.Err }

// Code is RECORD_QUARANTINED.
func (e *QuarantinedError) Code() string { return codeRecordQuarantined }

func trimStorage(s string) string {
	const p = "storage: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// AuditEvent is one line of the audit log (docs/spec.md#audit-event): every write to
// canonical storage records who moved what from which state to which.
// Field names are the platform's; times are RFC 3339 UTC.
type AuditEvent struct {
	// ID names the event's object; it sorts by time. It is not part of the
	// JSON (the key carries it) and is filled in when the log is written
	// and read.
	ID         string    `json:"-"`
	TS         time.Time `json:"ts"`
	Event      string    `json:"event"` // e.g. "job.status.update"
	Actor      string    `json:"actor"` // e.g. "orchestration-layer"
	JobID      string    `json:"job_id,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
	EntryID    string    `json:"entry_id,omitempty"`
	ArtifactID string    `json:"artifact_id,omitempty"`
	ProposalID string    `json:"proposal_id,omitempty"`
	// TenantID is the tenant of the record the event is about
	// (docs/spec.md#tenants); empty for the default tenant.
	TenantID string `json:"tenant_id,omitempty"`
	From     string `json:"from"` // empty for a creation
	To       string `json:"to"`
	Node     string `json:"node"` // the host that wrote
	// Context is the transition's context (docs/spec.md#transition-context, a
	// TransitionContext as JSON: run id, user id, initiator,
	// timestamp, metadata, approval and external-event details), when the
	// writer gives one; the platform's fields above keep their names.
	Context json.RawMessage `json:"context,omitempty"`
	// Prior are the events a batched object carries before this one (the
	// job queue writes one object per job life segment: every move from
	// the job's creation or last rest to its next rest, issue 12). The
	// object's own fields are the segment's last event, so a reader that
	// knows only the platform's fields sees where the job came to rest; a
	// reader of the log gets every event.
	Prior []AuditEvent `json:"prior,omitempty"`
}
