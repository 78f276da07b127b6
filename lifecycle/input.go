package lifecycle

import (
	"errors"
	"fmt"
)

// ErrInvalidInput is matched by every [*InputError], and by the error of
// an id that breaks the store's rules for ids.
var ErrInvalidInput = errors.New("lifecycle: invalid input")

// InputError reports a caller's field that breaks its limit or is not
// clean text (docs/spec.md#limits). Nothing is written when one is
// returned. It matches [ErrInvalidInput]; its code is INPUT_TOO_LARGE
// (HTTP 413) when the field is over its limit (Size > Limit) and
// INVALID_INPUT (HTTP 400) otherwise.
type InputError struct {
	// Field names the field as the API spells it, e.g. "reason",
	// "decided_by", "tags[3]".
	Field string
	// Limit is the field's limit: bytes, or items for a list.
	Limit int
	// Size is the field's size when it is over Limit, else 0.
	Size int
	// Reason says what is wrong, e.g. "not valid UTF-8".
	Reason string
}

// Error names the field and the problem; it never quotes the value, which
// may be megabytes long.
func (e *InputError) Error() string {
	return fmt.Sprintf("lifecycle: invalid %s: %s", e.Field, e.Reason)
}

// Is matches ErrInvalidInput.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// Code is INPUT_TOO_LARGE for a field over its limit, INVALID_INPUT
// otherwise.
func (e *InputError) Code() string {
	if e.Size > e.Limit {
		return codeInputTooLarge
	}
	return codeInvalidInput
}
