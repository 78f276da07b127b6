package run

import (
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Constants of runs: triggers, idempotency sources and record states,
// limits.
const (
	// Triggers of a run (docs/spec.md#run-status).
	TriggerManual = "manual"
	TriggerCron   = "cron"
	TriggerEvent  = "event"

	// Sources of idempotency keys (docs/spec.md#idempotency), as IdempotencyRecord
	// names them.
	SourceGitHub    = "github_webhook"
	SourceAPI       = "api"
	SourceSlack     = "slack"
	SourceScheduler = "scheduler"

	// States of an IdempotencyRecord (docs/spec.md#idempotency-record).
	IdempotencyProcessing = "processing"
	IdempotencyCompleted  = "completed"
	IdempotencyFailed     = "failed"

	// MaxIdempotencyKeyBytes bounds an idempotency key (docs/spec.md#limits;
	// the schemes' own parts are short); a longer key is refused
	// with INPUT_TOO_LARGE.
	MaxIdempotencyKeyBytes = 512
)

// Sentinel errors of the run package. Match them with errors.Is;
// lifecycle.ErrorCode gives each its code.
var (
	// ErrNotFound: no run has the id asked for (RUN_NOT_FOUND, 404).
	ErrNotFound = lifecycle.ErrRunNotFound
	// ErrUnsupported: the run's machine has no such operation, e.g. cancel
	// on the canonical machine (RUN_UNSUPPORTED_OPERATION).
	ErrUnsupported = lifecycle.ErrRunUnsupported
	// ErrInvalidConfig is matched by errors from NewRunner about its arguments.
	ErrInvalidConfig = errors.New("run: invalid runner config")
	// ErrRunnerStarted is returned by a second call of Runner.Run.
	ErrRunnerStarted = errors.New("run: runner already running")
	// ErrIdempotencyConflict: the key was used with another request.
	ErrIdempotencyConflict = lifecycle.ErrIdempotencyConflict
	// ErrIdempotencyExpired: the key's record outlived its TTL.
	ErrIdempotencyExpired = lifecycle.ErrIdempotencyExpired
	// ErrIdempotencyInProgress: the key's run is still being created
	// (IdempotencyInProgressError); retry.
	ErrIdempotencyInProgress = lifecycle.ErrIdempotencyInProgress
	// ErrInvalidIdempotencyKey: the key follows none of the schemes.
	ErrInvalidIdempotencyKey = errors.New("run: invalid idempotency key")
)

// RequestError is a request the Runner refuses as malformed; it carries the
// code INVALID_REQUEST (an HTTP 400).
type RequestError struct {
	Field  string
	Reason string
}

// Error names the field and why it was refused.
func (e *RequestError) Error() string { return "run: invalid " + e.Field + ": " + e.Reason }

// Code is INVALID_REQUEST.
func (e *RequestError) Code() string { return codes.InvalidRequest }

// unsupportedError names the machine and the operation it lacks; it
// matches ErrUnsupported.
type unsupportedError struct {
	Machine   string
	Operation string
}

// Error names the machine and the missing operation.
func (e *unsupportedError) Error() string {
	return fmt.Sprintf("run: machine %s does not support %s", e.Machine, e.Operation)
}

// Is matches ErrUnsupported.
func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Code is RUN_UNSUPPORTED_OPERATION.
func (e *unsupportedError) Code() string { return codes.Unsupported }
