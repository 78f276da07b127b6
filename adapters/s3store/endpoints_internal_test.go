package s3store

import (
	"errors"
	"fmt"
	"io"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// An error with no HTTP status is the endpoint's trouble only when the
// request got no answer; one refused on this side (no credentials, a
// signing failure) was counted as the endpoint being down, so a Worker
// with bad credentials waited at start for an "unreachable" store.
func TestNoAnswerIsNotACredentialsError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"send failed", &smithyhttp.RequestSendError{Err: errors.New("dial tcp: connection refused")}, true},
		{"attempt timeout", &attemptTimeoutError{err: errors.New("context canceled")}, true},
		{"response cut", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), true},
		{"no credentials", errors.New("failed to retrieve credentials: no EC2 IMDS role found"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := endpointFailure(tt.err); got != tt.want {
				t.Fatalf("endpointFailure(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
