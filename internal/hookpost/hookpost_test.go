package hookpost_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/hookpost"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPost: a 2xx is delivery, with the body and content type sent; any
// other status is an error naming it; an answer that never comes ends at
// the limit.
func TestPost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		stall   bool
		wantErr string
	}{
		{"ok", http.StatusNoContent, false, ""},
		{"refused", http.StatusBadGateway, false, "HTTP 502 Bad Gateway"},
		{"redirect not followed is not delivery", http.StatusFound, false, "HTTP 302 Found"},
		{"stalled", http.StatusOK, true, "exceeded its 200ms limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			defer close(release)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if string(b) != `{"a":1}` || r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
					w.WriteHeader(http.StatusTeapot)
					return
				}
				if tt.stall {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			u := &deadline.Units{Clock: clock.Real()}
			err := hookpost.Post(context.Background(), u, "test", 200*time.Millisecond, client, srv.URL, []byte(`{"a":1}`))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Post: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Post = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
