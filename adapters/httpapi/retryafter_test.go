package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestInProgressAnswersRetryAfter: a submit whose key's run is still being
// created is answered 409 IDEMPOTENCY_IN_PROGRESS with Retry-After, and
// no run id.
func TestInProgressAnswersRetryAfter(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/agents/run", nil)
	(&Server{}).writeError(w, r, &run.IdempotencyInProgressError{Key: "api:c:1", Err: errors.New("store down")})
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != "1" ||
		!strings.Contains(w.Body.String(), codes.IdempotencyInProgress) || strings.Contains(w.Body.String(), "run_id") {
		t.Fatalf("%d Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}
