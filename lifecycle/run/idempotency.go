package run

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// IdempotencyError carries the key and the error code of an idempotency
// failure; it matches ErrIdempotencyConflict or ErrIdempotencyExpired.
type IdempotencyError struct {
	Key   string
	RunID string
	kind  error
}

// Error names the failure, the key and its run.
func (e *IdempotencyError) Error() string {
	return fmt.Sprintf("%v: %s (run %s)", e.kind, e.Key, e.RunID)
}

// Unwrap returns the sentinel.
func (e *IdempotencyError) Unwrap() error { return e.kind }

// Code is IDEMPOTENCY_CONFLICT or IDEMPOTENCY_EXPIRED.
func (e *IdempotencyError) Code() string {
	if e.kind == ErrIdempotencyExpired {
		return codes.IdempotencyExpired
	}
	return codes.IdempotencyConflict
}

// IdempotencyFailedError answers a key whose request failed and used up
// its attempts (Config.IdempotencyMaxAttempts), until its record expires:
// the stored error, with its stored code.
type IdempotencyFailedError struct {
	Key string
	// ErrorCode and Message are the failure as recorded.
	ErrorCode, Message string
	Attempts           int
}

// Error names the key and the stored error.
func (e *IdempotencyFailedError) Error() string {
	return fmt.Sprintf("run: idempotency key %s failed after %d attempts: %s", e.Key, e.Attempts, e.Message)
}

// Code is the stored error's code (INTERNAL_ERROR for a record that kept
// none).
func (e *IdempotencyFailedError) Code() string {
	if e.ErrorCode != "" {
		return e.ErrorCode
	}
	return codes.InternalError
}

// IdempotencyInProgressError answers a duplicate whose run is not written
// yet and could not be written by this submit either (the store failed):
// the key is still being processed; the caller retries (after
// RetryAfter). It carries no run id, since none exists yet. It matches
// lifecycle.ErrIdempotencyInProgress; its code is IDEMPOTENCY_IN_PROGRESS.
type IdempotencyInProgressError struct {
	Key string
	Err error
}

// Error names the key and why its run could not be written.
func (e *IdempotencyInProgressError) Error() string {
	return fmt.Sprintf("run: idempotency key %s: its run is still being created (%v)", e.Key, e.Err)
}

// Is matches lifecycle.ErrIdempotencyInProgress.
func (e *IdempotencyInProgressError) Is(target error) bool {
	return target == lifecycle.ErrIdempotencyInProgress
}

// Unwrap returns the store's error.
func (e *IdempotencyInProgressError) Unwrap() error { return e.Err }

// Code is IDEMPOTENCY_IN_PROGRESS.
func (e *IdempotencyInProgressError) Code() string { return codes.IdempotencyInProgress }

// RetryAfter is when a retry may find the run written.
func (e *IdempotencyInProgressError) RetryAfter() time.Duration { return time.Second }

// idempotencyKey is a parsed key: its source and the parts after the scheme.
type idempotencyKey struct {
	Source string
	Parts  []string
}

// parseIdempotencyKey checks a key against the schemes of docs/spec.md#idempotency:
// github:{delivery_id}, api:{client_id}:{request_id},
// slack:{team_id}:{trigger_id}, scheduler:{schedule_id}:{execution_time}
// (the execution time may itself contain colons). Parts are non-empty,
// printable UTF-8 without spaces; the whole key is at most 512 bytes.
func parseIdempotencyKey(key string) (idempotencyKey, error) {
	bad := func(reason string) (idempotencyKey, error) {
		return idempotencyKey{}, fmt.Errorf("%w %q: %s", ErrInvalidIdempotencyKey, truncate(key, 60), reason)
	}
	if err := codes.CheckText("idempotency_key", key, MaxIdempotencyKeyBytes, codes.OneLine); err != nil {
		// Both matchable: ErrInvalidIdempotencyKey and the *InputError.
		return idempotencyKey{}, fmt.Errorf("%w: %w", ErrInvalidIdempotencyKey, err)
	}
	if strings.ContainsRune(key, ' ') {
		return bad("contains a space")
	}
	scheme, rest, ok := strings.Cut(key, ":")
	if !ok {
		return bad("no scheme (want github:, api:, slack: or scheduler:)")
	}
	var k idempotencyKey
	switch scheme {
	case "github":
		k = idempotencyKey{Source: SourceGitHub, Parts: []string{rest}}
	case "api", "slack", "scheduler":
		a, b, ok := strings.Cut(rest, ":")
		if !ok {
			return bad(fmt.Sprintf("%s keys have two parts after the scheme", scheme))
		}
		k = idempotencyKey{Source: map[string]string{"api": SourceAPI, "slack": SourceSlack, "scheduler": SourceScheduler}[scheme], Parts: []string{a, b}}
	default:
		return bad(fmt.Sprintf("unknown scheme %q", scheme))
	}
	for _, p := range k.Parts {
		if p == "" {
			return bad("empty part")
		}
	}
	return k, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// IdempotencyRecord is the check-and-set record of one key (docs/spec.md#idempotency-record),
// at idempotency/{sha256 of the key}.json. The run id is chosen when the
// record's generation is created and kept for its whole life, so every
// duplicate learns it at once and no key has two runs in one generation.
type IdempotencyRecord struct {
	lifecycle.Meta

	Key         string          `json:"key"`
	Source      string          `json:"source"`
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
func (rec *IdempotencyRecord) LeaseEnd() (time.Time, bool) {
	switch {
	case rec.LeaseExpiresAt != nil:
		return *rec.LeaseExpiresAt, true
	case rec.LockExpiresAt != nil:
		return *rec.LockExpiresAt, true
	}
	return time.Time{}, false
}

// leaseLive tells whether a processing record's lease still holds at now.
func (rec *IdempotencyRecord) leaseLive(now time.Time) bool {
	end, ok := rec.LeaseEnd()
	return ok && !now.After(end)
}

// expiredFor tells whether the record's generation is over for a submit
// of the request hash at now, so that submit starts a new one (a new run
// id). A completed or failed record ends at expires_at. A processing one
// may already hold its run: the same request never ends it (it completes
// that run instead), another one only once both expires_at and the lease
// have passed.
func (rec *IdempotencyRecord) expiredFor(hash string, now time.Time) bool {
	if !now.After(rec.ExpiresAt) {
		return false
	}
	if rec.Status != IdempotencyProcessing {
		return true
	}
	return rec.RequestHash != hash && !rec.leaseLive(now)
}

func requestHash(req SubmitRequest) string {
	h := sha256.New()
	var compact []byte
	if len(req.Input) > 0 {
		compact = compactJSON(req.Input)
	}
	fmt.Fprintf(h, "%s\x00%s\x00", req.AgentSlug, req.Trigger)
	h.Write(compact)
	return hex.EncodeToString(h.Sum(nil))
}

func compactJSON(b []byte) []byte {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return b
	}
	out, err := json.Marshal(v) // map keys sorted: one form per value
	if err != nil {
		return b
	}
	return out
}

// idemAction is what a submit does with its key's record.
type idemAction int

const (
	// idemOwn: this submit holds the record's lease: it creates the run and
	// records the outcome (a new key or generation, a failed key's retry,
	// a lapsed lease taken over).
	idemOwn idemAction = iota
	// idemHelp: another submit holds a live lease: this one completes the
	// creation of the recorded run itself (its writes are create-only, so
	// both writing is harmless), then answers.
	idemHelp
	// idemDone: the record is completed: its run exists.
	idemDone
)

// idemClaim is how a submit stands with its key after reading the record.
type idemClaim struct {
	rec    IdempotencyRecord
	action idemAction
	// fresh: a new generation or a failed key's new attempt, answered as
	// a first submit (not a duplicate).
	fresh bool
	// owner names this submit in the record's lease.
	owner string
}

// errKeep ends an Apply that judged the record and need not write it.
var errKeep = errors.New("run: idempotency record kept as is")

// idempotency answers the submits with an idempotency key
// (docs/spec.md#idempotency) through the key's record, and reads a record.
type idempotency struct {
	store   *storage.Store
	now     func() time.Time
	log     *slog.Logger
	metrics Metrics
	cfg     idemConfig
	absent  *core.Absence
	gate    *dedupeGate
	creator *creator
}

// idemConfig is what of Config the idempotency flow reads.
type idemConfig struct {
	Owner                   string
	IdempotencyLease        time.Duration
	IdempotencyCompletedTTL time.Duration
	IdempotencyFailedTTL    time.Duration
	IdempotencyMaxAttempts  int
}

// submit is the check-and-set flow of docs/spec.md#idempotency.
// No answer names a run that does not exist when it is given: a submit
// that creates the run answers once it is written, a duplicate of a
// completed key answers its run, and a duplicate whose run may not be
// written yet writes it itself (the same run id, from its own request,
// which hashes alike) or, if it cannot, answers IDEMPOTENCY_IN_PROGRESS
// without an id. Another request under a live key is IDEMPOTENCY_CONFLICT;
// a failed key is retried under the same run id while attempts are left,
// and answers its stored error after.
func (im *idempotency) submit(ctx context.Context, agent *agentDef, req SubmitRequest) (SubmitResult, error) {
	k, err := parseIdempotencyKey(req.IdempotencyKey)
	if err != nil {
		return SubmitResult{}, &RequestError{Field: "idempotency_key", Reason: err.Error()}
	}
	key := layout.IdempotencyKey(req.IdempotencyKey)
	c, err := im.claimKey(ctx, key, req, k, requestHash(req))
	if err != nil {
		return SubmitResult{}, err
	}
	res, err := im.actOnClaim(ctx, agent, req, key, &c)
	if err != nil {
		return SubmitResult{}, err
	}
	im.metrics.Idempotency(k.Source, res.Duplicate)
	if res.Duplicate {
		im.log.LogAttrs(ctx, slog.LevelInfo, "idempotency_hit", slog.String("key", req.IdempotencyKey), slog.String("cachedRunId", res.RunID))
	}
	return res, nil
}

// claimKey creates the key's record, or judges the existing one (judgeKey).
func (im *idempotency) claimKey(ctx context.Context, key string, req SubmitRequest, k idempotencyKey, hash string) (idemClaim, error) {
	owner := im.cfg.Owner + "#" + randomHex(4)
	var err error
	// The record exists but reads missing when it was deleted (expired)
	// between the create and the read, or on a store that settles, for a
	// moment: the claim starts over, a few times, then the key is busy.
	for range 3 {
		c := idemClaim{owner: owner, fresh: true}
		c.rec = IdempotencyRecord{Key: req.IdempotencyKey, Source: k.Source, RequestHash: hash}
		im.newGeneration(&c.rec, c.owner, im.now())
		_, err = records.Create(ctx, im.store, key, &c.rec)
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return c, err
		}
		var after IdempotencyRecord
		_, after, err = (&core.Record[IdempotencyRecord, *IdempotencyRecord]{Store: im.store, Key: key}).Apply(ctx, func(cur *IdempotencyRecord) error {
			return im.judgeKey(cur, &c, hash)
		})
		switch {
		case errors.Is(err, errKeep):
			return c, nil
		case err == nil:
			c.rec = after
			return c, nil
		case !errors.Is(err, storage.ErrNotFound):
			return c, err
		}
	}
	return idemClaim{}, &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: err}
}

// judgeKey decides what a submit of hash does with the existing record
// cur, changing it when the submit takes the lease; errKeep when it need
// not be written.
func (im *idempotency) judgeKey(cur *IdempotencyRecord, c *idemClaim, hash string) error {
	now := im.now()
	c.action, c.fresh = idemOwn, false
	switch {
	case cur.expiredFor(hash, now):
		// A new generation: a new run id, the old one's run left alone.
		c.fresh = true
		prev := cur.RunID
		cur.RequestHash, cur.Response = hash, nil
		im.newGeneration(cur, c.owner, now)
		cur.PreviousRunID = prev
	case cur.RequestHash != hash:
		return &IdempotencyError{Key: cur.Key, RunID: cur.RunID, kind: ErrIdempotencyConflict}
	case cur.Status == IdempotencyCompleted:
		c.action, c.rec = idemDone, *cur
		return errKeep
	case cur.Status == IdempotencyFailed && cur.Attempts >= im.cfg.IdempotencyMaxAttempts:
		return &IdempotencyFailedError{Key: cur.Key, ErrorCode: cur.ErrorCode, Message: cur.Error, Attempts: cur.Attempts}
	case cur.Status == IdempotencyProcessing && cur.leaseLive(now) && cur.LeaseOwner != c.owner:
		c.action, c.rec = idemHelp, *cur
		return errKeep
	default:
		// A failed key with attempts left, or a lapsed lease: this submit
		// takes the lease and creates the same run.
		c.fresh = cur.Status == IdempotencyFailed
		im.takeLease(cur, c.owner, now)
	}
	return nil
}

// newGeneration starts a record's generation at now: a new run id, held
// by owner.
func (im *idempotency) newGeneration(rec *IdempotencyRecord, owner string, now time.Time) {
	rec.RunID, rec.CreatedAt, rec.ExpiresAt = newRunID(now), now, time.Time{}
	rec.Attempts, rec.PreviousRunID = 0, ""
	im.takeLease(rec, owner, now)
}

// takeLease makes owner the record's processing submitter until now plus
// the lease. lock_expires_at is written too, so a process of an earlier
// release reads the lease it knows.
func (im *idempotency) takeLease(rec *IdempotencyRecord, owner string, now time.Time) {
	lease := now.Add(im.cfg.IdempotencyLease)
	rec.Status, rec.LeaseOwner, rec.LeaseExpiresAt, rec.LockExpiresAt = IdempotencyProcessing, owner, &lease, &lease
	rec.Error, rec.ErrorCode, rec.UpdatedAt = "", "", now
	// A processing generation may hold its run: it lives as long as a
	// completed one would.
	if exp := now.Add(im.cfg.IdempotencyCompletedTTL); rec.ExpiresAt.Before(exp) {
		rec.ExpiresAt = exp
	}
	rec.Attempts++
}

// actOnClaim does what the claim says and answers the submit.
func (im *idempotency) actOnClaim(ctx context.Context, agent *agentDef, req SubmitRequest, key string, c *idemClaim) (SubmitResult, error) {
	runID := c.rec.RunID
	switch c.action {
	case idemDone:
		return SubmitResult{RunID: runID, Duplicate: true}, nil
	case idemHelp:
		if err := im.ensureRun(ctx, agent, req, c); err != nil {
			im.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_in_progress", slog.String("key", req.IdempotencyKey),
				slog.String("runId", runID), slog.String("error", err.Error()))
			return SubmitResult{}, &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: err}
		}
		im.recordOutcome(ctx, key, c, nil)
		return SubmitResult{RunID: runID, Duplicate: true}, nil
	}
	createErr := im.ensureRun(ctx, agent, req, c)
	var busy *IdempotencyInProgressError
	if !errors.As(createErr, &busy) {
		// A run not yet known to be missing is no outcome: the record
		// stays processing under this submit's lease, and a retry goes on
		// where it stopped (recorded as a failure, it used up the key's
		// attempts and then answered that failure for good).
		im.recordOutcome(ctx, key, c, createErr)
	}
	if createErr != nil {
		return SubmitResult{}, createErr
	}
	return SubmitResult{RunID: runID, Duplicate: !c.fresh}, nil
}

// ensureRun makes the claim's run exist: created by this submit, or found
// written (a submit of the same generation wrote it). A run that may exist
// is read first, so a finished run is not given its first entries again.
func (im *idempotency) ensureRun(ctx context.Context, agent *agentDef, req SubmitRequest, c *idemClaim) error {
	if err := im.gate.markRun(ctx, c); err != nil {
		return err
	}
	if !c.fresh || c.rec.Attempts > 1 {
		statusKey, err := layout.RunStatusKey(agent.Slug, c.rec.RunID)
		if err != nil {
			return err
		}
		_, _, err = im.store.Get(ctx, statusKey)
		switch {
		case err == nil:
			im.absent.Found(statusKey)
			return nil
		case !errors.Is(err, storage.ErrNotFound):
			return err
		case !im.absent.Confirmed(statusKey, im.now()):
			// One not-found of a store that settles: creating the run
			// now could land its first status over the live one and run
			// it again, so the key is busy until the absence is sure.
			return &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: err}
		}
	}
	// The run's start is its generation's: every submit that creates it
	// writes the same entries.
	return im.creator.createRun(ctx, agent, req, c.rec.RunID, c.rec.CreatedAt)
}

// recordOutcome writes the claim's outcome into the record: completed
// (by any submit that saw the run written), or failed (only by the lease's
// holder, never over a completed record). A failure to write is logged:
// the run exists, and the next duplicate finds it.
func (im *idempotency) recordOutcome(ctx context.Context, key string, c *idemClaim, createErr error) {
	_, _, err := (&core.Record[IdempotencyRecord, *IdempotencyRecord]{Store: im.store, Key: key}).Apply(ctx, func(cur *IdempotencyRecord) error {
		if cur.RunID != c.rec.RunID || cur.Status == IdempotencyCompleted {
			return errKeep // done, or a later generation
		}
		now := im.now()
		if createErr == nil {
			cur.Status, cur.ExpiresAt, cur.UpdatedAt = IdempotencyCompleted, now.Add(im.cfg.IdempotencyCompletedTTL), now
			cur.Response, _ = json.Marshal(map[string]string{"run_id": cur.RunID})
		} else {
			if cur.Status != IdempotencyProcessing || cur.LeaseOwner != c.owner {
				return errKeep // another submit holds it now
			}
			cur.Status, cur.Error, cur.ErrorCode = IdempotencyFailed, createErr.Error(), lifecycle.ErrorCode(createErr)
			cur.ExpiresAt, cur.UpdatedAt = now.Add(im.cfg.IdempotencyFailedTTL), now
		}
		cur.LeaseOwner, cur.LeaseExpiresAt, cur.LockExpiresAt = "", nil, nil
		return nil
	})
	if err != nil && !errors.Is(err, errKeep) {
		im.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_record_update_failed", slog.String("key", c.rec.Key), slog.String("error", err.Error()))
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// read: see Runner.Idempotency.
func (im *idempotency) read(ctx context.Context, key string) (IdempotencyRecord, error) {
	if err := codes.CheckText("idempotency_key", key, MaxIdempotencyKeyBytes, codes.OneLine); err != nil {
		return IdempotencyRecord{}, err
	}
	if _, err := parseIdempotencyKey(key); err != nil {
		return IdempotencyRecord{}, &RequestError{Field: "idempotency_key", Reason: err.Error()}
	}
	rec, _, err := records.Read[IdempotencyRecord](ctx, im.store, layout.IdempotencyKey(key))
	if err != nil {
		return rec, err
	}
	if im.now().After(rec.ExpiresAt) && rec.Status != IdempotencyProcessing {
		return rec, &IdempotencyError{Key: key, RunID: rec.RunID, kind: ErrIdempotencyExpired}
	}
	return rec, nil
}
