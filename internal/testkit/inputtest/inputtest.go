// Package inputtest holds the one assertion of the input checks' errors,
// shared by the tests of every package that takes free text.
package inputtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Check asserts that err is nil when wantCode is empty, and else an
// *lifecycle.InputError for field and limit, matching ErrInvalidInput, with
// wantCode and a short message that does not quote the value.
func Check(t testing.TB, err error, field string, limit int, wantCode string) {
	t.Helper()
	if wantCode == "" {
		if err != nil {
			t.Errorf("want no error, got %v", err)
		}
		return
	}
	var ie *lifecycle.InputError
	if !errors.As(err, &ie) || !errors.Is(err, lifecycle.ErrInvalidInput) {
		t.Errorf("want an *InputError matching ErrInvalidInput, got %.300v", err)
		return
	}
	if ie.Field != field || ie.Limit != limit {
		t.Errorf("Field, Limit = %q, %d; want %q, %d", ie.Field, ie.Limit, field, limit)
	}
	if got := lifecycle.ErrorCode(fmt.Errorf("wrapped: %w", err)); got != wantCode {
		t.Errorf("code %s, want %s (%v)", got, wantCode, err)
	}
	if (ie.Size > ie.Limit) != (wantCode == codes.InputTooLarge) {
		t.Errorf("TooLarge() = %v for code %s", (ie.Size > ie.Limit), wantCode)
	}
	if len(err.Error()) > 200 {
		t.Errorf("message of %d bytes: the value leaked into it", len(err.Error()))
	}
}
