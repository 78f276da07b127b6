package lifecycle

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for the categories of failure. Match them with errors.Is;
// the typed errors below carry the details and are reached with errors.As.
var (
	// ErrInvalidTransition: the machine has no such move (or its guard refused it).
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrTerminalState: the move starts in a terminal state. Errors that match
	// it also match ErrInvalidTransition.
	ErrTerminalState = errors.New("terminal state")
	// ErrForbiddenActor: the move exists but the actor may not make it.
	ErrForbiddenActor = errors.New("forbidden actor")
)

// InvalidTransitionError reports a move the machine does not allow. It matches
// [ErrInvalidTransition], and also [ErrTerminalState] when From is terminal;
// Unknown names a state the machine does not define.
type InvalidTransitionError struct {
	Machine string
	From    string
	// To is empty when an event was fired and no transition matched it.
	To string
	// Event is empty when a from → to move was checked directly.
	Event string
	// ValidNext lists the states reachable from From in one move.
	ValidNext []string
	// Terminal tells whether From is a terminal state.
	Terminal bool
	// Unknown names the state the machine does not define, if that is the cause.
	Unknown string
	// Guards names the guards that refused the move, if that is the cause.
	Guards []string
	// Context is the transition context of the refused move, when the
	// caller gave one .
	Context *TransitionContext
}

// Error describes the move, why it was refused and what the valid moves are.
func (e *InvalidTransitionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: invalid transition from %q", e.Machine, e.From)
	if e.To != "" {
		fmt.Fprintf(&b, " to %q", e.To)
	}
	if e.Event != "" {
		fmt.Fprintf(&b, " on event %q", e.Event)
	}
	switch {
	case e.Unknown != "":
		fmt.Fprintf(&b, ": unknown state %q", e.Unknown)
	case e.Terminal:
		fmt.Fprintf(&b, ": %q is a terminal state", e.From)
	case len(e.Guards) > 0:
		fmt.Fprintf(&b, ": guard %s not met", strings.Join(e.Guards, ", "))
	}
	if len(e.ValidNext) == 0 {
		b.WriteString(" (no valid next states)")
	} else {
		fmt.Fprintf(&b, " (valid next states: %s)", strings.Join(e.ValidNext, ", "))
	}
	if e.Context != nil {
		if s := e.Context.summary(); s != "" {
			fmt.Fprintf(&b, " [%s]", s)
		}
	}
	return b.String()
}

// Is matches ErrInvalidTransition always, and ErrTerminalState when From is
// terminal.
func (e *InvalidTransitionError) Is(target error) bool {
	switch target {
	case ErrInvalidTransition:
		return true
	case ErrTerminalState:
		return e.Terminal
	}
	return false
}

// Code is the error code (docs/spec.md#error-codes): RUN_TERMINAL_STATE when From is terminal,
// RUN_INVALID_TRANSITION otherwise.
func (e *InvalidTransitionError) Code() string {
	if e.Terminal {
		return codeTerminalState
	}
	return codeInvalidTransition
}

// ForbiddenActorError reports an actor that may not make a move the machine
// otherwise allows. It matches [ErrForbiddenActor].
type ForbiddenActorError struct {
	Machine string
	From    string
	To      string
	Event   string
	Actor   Actor
	// Allowed lists the actors that may make the move.
	Allowed []Actor
	// Context is the transition context of the refused move, when the
	// caller gave one .
	Context *TransitionContext
}

// Error names the actor, the move and who may make it.
func (e *ForbiddenActorError) Error() string {
	allowed := make([]string, len(e.Allowed))
	for i, a := range e.Allowed {
		allowed[i] = string(a)
	}
	msg := fmt.Sprintf("%s: actor %q may not move %q to %q on event %q (allowed: %s)",
		e.Machine, e.Actor, e.From, e.To, e.Event, strings.Join(allowed, ", "))
	if e.Context != nil {
		if s := e.Context.summary(); s != "" {
			msg += " [" + s + "]"
		}
	}
	return msg
}

// Is matches ErrForbiddenActor.
func (e *ForbiddenActorError) Is(target error) bool { return target == ErrForbiddenActor }

// Code is FORBIDDEN.
func (e *ForbiddenActorError) Code() string { return codeForbidden }

// Category sentinels of the store, shared by every part of the SDK (the
// storage package's ErrNotFound and ErrUnavailable are these values), so
// a caller matches them without importing the store.
var (
	// ErrNotFound: the record asked for does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrUnavailable is matched by the error of a store call that met only
	// transient failures until its wait ran out: the store was unreachable.
	ErrUnavailable = errors.New("storage: store unavailable")
)

// RunError is an error with a code of the code table (docs/spec.md#error-codes). A step returns one (or wraps one)
// to say why it failed, e.g. NLM_UNAVAILABLE; the run's error field then
// reads "CODE: message". Retryable says whether another attempt may help.
type RunError struct {
	Code    string
	Message string
	// Permanent stops retries: the step fails at once.
	Permanent bool
	// Err is the cause, if any.
	Err error
}

// NewRunError returns a retryable *RunError.
func NewRunError(code, format string, args ...any) *RunError {
	return &RunError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error is "CODE: message", the form of status.json's error field.
func (e *RunError) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause.
func (e *RunError) Unwrap() error { return e.Err }
