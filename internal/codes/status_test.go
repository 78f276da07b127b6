package codes_test

import (
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
)

// TestOfStatusAgreesWithTheCodeTable: the code a client gives an
// answer without one maps back, through lifecycle's one code table, to the
// status it came with, so the two never disagree.
func TestOfStatusAgreesWithTheCodeTable(t *testing.T) {
	t.Parallel()
	for status := 400; status < 600; status++ {
		code := codes.OfStatus(status)
		if code == codes.InternalError {
			continue // the fallback for statuses no code has
		}
		if got := codes.HTTPStatus(code); got != status {
			t.Errorf("status %d reads as %s, which the code table answers with %d", status, code, got)
		}
	}
}
