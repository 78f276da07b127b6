// Package idemrecord holds the documents of the idempotency keys of runs
// (docs/spec.md#idempotency-record): the check-and-set record of a key, the
// marker of each run of a key, their states and sources, and the error of
// a key used with another request or read after its TTL. The Runner writes
// them; retention deletes them; the webhooks read a key's record to answer
// a redelivery.
package idemrecord

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Sources of idempotency keys (docs/spec.md#idempotency), as a Record
// names them.
const (
	SourceGitHub    = "github_webhook"
	SourceAPI       = "api"
	SourceSlack     = "slack"
	SourceScheduler = "scheduler"
)

// States of a Record (docs/spec.md#idempotency-record).
const (
	Processing = "processing"
	Completed  = "completed"
	Failed     = "failed"
)

// Record is the check-and-set record of one key (docs/spec.md#idempotency-record),
// at idempotency/{sha256 of the key}.json. The run id is chosen when the
// record's generation is created and kept for its whole life, so every
// duplicate learns it at once and no key has two runs in one generation.
type Record struct {
	lifecycle.Meta

	Key    string `json:"key"`
	Source string `json:"source"`
	// TenantID is the tenant whose key this is (docs/spec.md#tenants);
	// empty for the default tenant, whose keys are kept as given.
	TenantID    string          `json:"tenant_id,omitempty"`
	RunID       string          `json:"run_id,omitempty"`
	Status      string          `json:"status"`
	RequestHash string          `json:"request_hash"`
	Response    json.RawMessage `json:"response,omitempty"`
	Error       string          `json:"error,omitempty"`
	// ErrorCode is the code of Error (absent in records of earlier
	// releases).
	ErrorCode string    `json:"error_code,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// LeaseOwner and LeaseExpiresAt, while processing: the submit that
	// creates the run and records its outcome, until when. A lapsed lease
	// is taken by the next submit of the same request.
	LeaseOwner     string     `json:"lease_owner,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// LockExpiresAt is the lease as earlier releases wrote it (with no
	// owner); read when LeaseExpiresAt is absent.
	LockExpiresAt *time.Time `json:"lock_expires_at,omitempty"`
	Attempts      int        `json:"attempts"`
	// PreviousRunID is the run of the expired generation this one
	// replaced, if any.
	PreviousRunID string `json:"previous_run_id,omitempty"`
}

// LeaseEnd is when the record's processing lease lapses, and whether it
// has one.
func (rec *Record) LeaseEnd() (time.Time, bool) {
	switch {
	case rec.LeaseExpiresAt != nil:
		return *rec.LeaseExpiresAt, true
	case rec.LockExpiresAt != nil:
		return *rec.LockExpiresAt, true
	}
	return time.Time{}, false
}

// LeaseLive tells whether a processing record's lease still holds at now.
func (rec *Record) LeaseLive(now time.Time) bool {
	end, ok := rec.LeaseEnd()
	return ok && !now.After(end)
}

// ExpiredFor tells whether the record's generation is over for a submit
// of the request hash at now, so that submit starts a new one (a new run
// id). A completed or failed record ends at expires_at. A processing one
// may already hold its run: the same request never ends it (it completes
// that run instead), another one only once both expires_at and the lease
// have passed.
func (rec *Record) ExpiredFor(hash string, now time.Time) bool {
	if !now.After(rec.ExpiresAt) {
		return false
	}
	if rec.Status != Processing {
		return true
	}
	return rec.RequestHash != hash && !rec.LeaseLive(now)
}

// Marker is the marker of one run of a key, at
// idempotency/runs/{sha256 of the key}/{runId}.json, written create-only
// before the run on a store that settles. Every submit that creates the
// run writes the same document.
type Marker struct {
	lifecycle.Meta

	Key         string `json:"key"`
	RunID       string `json:"run_id"`
	RequestHash string `json:"request_hash"`
	// CreatedAt is the generation's start (the record's created_at),
	// ExpiresAt when it can no longer compete (created_at plus the
	// completed TTL); retention deletes the marker after it.
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Replaces is the run of the expired generation this one followed.
	Replaces string `json:"replaces,omitempty"`
}

// Error carries the key and the error code of an idempotency failure; it
// matches lifecycle.ErrIdempotencyConflict or
// lifecycle.ErrIdempotencyExpired (its Kind).
type Error struct {
	Key   string
	RunID string
	Kind  error
}

// Error names the failure, the key and its run.
func (e *Error) Error() string {
	return fmt.Sprintf("%v: %s (run %s)", e.Kind, e.Key, e.RunID)
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Kind }

// Code is IDEMPOTENCY_CONFLICT or IDEMPOTENCY_EXPIRED.
func (e *Error) Code() string {
	if e.Kind == lifecycle.ErrIdempotencyExpired {
		return codes.IdempotencyExpired
	}
	return codes.IdempotencyConflict
}

// Read reads the record of a key: an *Error matching
// lifecycle.ErrIdempotencyExpired, with the record, once its TTL has
// passed at now; storage.ErrNotFound when there is none.
func Read(ctx context.Context, store *storage.Store, now time.Time, key string) (Record, error) {
	rec, _, err := records.Read[Record](ctx, store, layout.IdempotencyKey(key))
	if err != nil {
		return rec, err
	}
	if now.After(rec.ExpiresAt) && rec.Status != Processing {
		return rec, &Error{Key: key, RunID: rec.RunID, Kind: lifecycle.ErrIdempotencyExpired}
	}
	return rec, nil
}
