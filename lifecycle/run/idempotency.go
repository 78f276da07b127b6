package run

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
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
// record is created, so every duplicate learns it at once.
type IdempotencyRecord struct {
	records.Meta
	Key           string          `json:"key"`
	Source        string          `json:"source"`
	RunID         string          `json:"run_id,omitempty"`
	Status        string          `json:"status"`
	RequestHash   string          `json:"request_hash"`
	Response      json.RawMessage `json:"response,omitempty"`
	Error         string          `json:"error,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	LockExpiresAt *time.Time      `json:"lock_expires_at,omitempty"`
	Attempts      int             `json:"attempts"`
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

// errDuplicate carries the run of an earlier submit out of the CAS loop.
type errDuplicate struct{ runID string }

func (e *errDuplicate) Error() string { return "duplicate of " + e.runID }

// submitIdempotent is the check-and-set flow of docs/spec.md#idempotency: a new key
// creates its record (processing) and the run; a completed or processing
// duplicate with the same request returns the first run; another request
// under the key is IDEMPOTENCY_CONFLICT; an expired record, a failed one with
// attempts left, or a processing one whose lock lapsed is taken over.
func (r *Runner) submitIdempotent(ctx context.Context, agent *agentDef, req SubmitRequest) (SubmitResult, error) {
	k, err := parseIdempotencyKey(req.IdempotencyKey)
	if err != nil {
		return SubmitResult{}, &RequestError{Field: "idempotency_key", Reason: err.Error()}
	}
	key := layout.IdempotencyKey(req.IdempotencyKey)
	hash := requestHash(req)
	now := r.now()
	lock := now.Add(r.cfg.IdempotencyLockTTL)
	rec := IdempotencyRecord{
		Key: req.IdempotencyKey, Source: k.Source, RunID: newRunID(now), Status: IdempotencyProcessing,
		RequestHash: hash, CreatedAt: now, UpdatedAt: now, ExpiresAt: lock, LockExpiresAt: &lock, Attempts: 1,
	}
	_, err = records.Create(ctx, r.store, key, &rec)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		_, rec, err = (&core.Record[IdempotencyRecord, *IdempotencyRecord]{Store: r.store, Key: key}).Apply(ctx, func(cur *IdempotencyRecord) error {
			now := r.now()
			switch {
			case now.After(cur.ExpiresAt) && cur.Status != IdempotencyProcessing,
				cur.Status == IdempotencyProcessing && cur.LockExpiresAt != nil && now.After(*cur.LockExpiresAt):
				// Expired, or its submitter died: this submit takes the key over.
			case cur.RequestHash != hash:
				return &IdempotencyError{Key: cur.Key, RunID: cur.RunID, kind: ErrIdempotencyConflict}
			case cur.Status == IdempotencyFailed && cur.Attempts < r.cfg.IdempotencyMaxAttempts:
			default:
				return &errDuplicate{runID: cur.RunID}
			}
			lock := now.Add(r.cfg.IdempotencyLockTTL)
			if cur.Status != IdempotencyProcessing || cur.RequestHash != hash {
				cur.RunID = newRunID(now)
			}
			cur.Status, cur.RequestHash, cur.UpdatedAt = IdempotencyProcessing, hash, now
			cur.ExpiresAt, cur.LockExpiresAt, cur.Error = lock, &lock, ""
			cur.Attempts++
			return nil
		})
		var dup *errDuplicate
		if errors.As(err, &dup) {
			r.cfg.Metrics.Idempotency(k.Source, true)
			r.log.LogAttrs(ctx, slog.LevelInfo, "idempotency_hit", slog.String("key", req.IdempotencyKey), slog.String("cachedRunId", dup.runID))
			return SubmitResult{RunID: dup.runID, Duplicate: true}, nil
		}
	}
	if err != nil {
		return SubmitResult{}, err
	}
	r.cfg.Metrics.Idempotency(k.Source, false)
	createErr := r.createRun(ctx, agent, req, rec.RunID)
	_, _, err = (&core.Record[IdempotencyRecord, *IdempotencyRecord]{Store: r.store, Key: key}).Apply(ctx, func(cur *IdempotencyRecord) error {
		if cur.RunID != rec.RunID {
			return nil // taken over meanwhile; leave it to its new owner
		}
		now := r.now()
		cur.UpdatedAt, cur.LockExpiresAt = now, nil
		if createErr != nil {
			cur.Status, cur.Error, cur.ExpiresAt = IdempotencyFailed, createErr.Error(), now.Add(r.cfg.IdempotencyFailedTTL)
			return nil
		}
		cur.Status, cur.ExpiresAt = IdempotencyCompleted, now.Add(r.cfg.IdempotencyCompletedTTL)
		cur.Response, _ = json.Marshal(map[string]string{"run_id": rec.RunID})
		return nil
	})
	if createErr != nil {
		return SubmitResult{}, createErr
	}
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_record_update_failed", slog.String("key", req.IdempotencyKey), slog.String("error", err.Error()))
	}
	return SubmitResult{RunID: rec.RunID}, nil
}

// Idempotency reads the record of a key: IDEMPOTENCY_EXPIRED once its TTL
// has passed, ErrNotFound (storage's) when there is none.
func (r *Runner) Idempotency(ctx context.Context, key string) (IdempotencyRecord, error) {
	if err := codes.CheckText("idempotency_key", key, MaxIdempotencyKeyBytes, codes.OneLine); err != nil {
		return IdempotencyRecord{}, err
	}
	if _, err := parseIdempotencyKey(key); err != nil {
		return IdempotencyRecord{}, &RequestError{Field: "idempotency_key", Reason: err.Error()}
	}
	rec, _, err := records.Read[IdempotencyRecord](ctx, r.store, layout.IdempotencyKey(key))
	if err != nil {
		return rec, err
	}
	if r.now().After(rec.ExpiresAt) && rec.Status != IdempotencyProcessing {
		return rec, &IdempotencyError{Key: key, RunID: rec.RunID, kind: ErrIdempotencyExpired}
	}
	return rec, nil
}
