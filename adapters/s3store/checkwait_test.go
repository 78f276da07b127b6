package s3store_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/s3store"
)

// TestCheckWait: with Config.CheckWait, Check asks a server that cannot be
// reached again every second until it answers or the wait is over; a
// bucket that does not exist is no reason to wait, and without CheckWait
// Check asks once. The server is a stub answering HeadBucket.
func TestCheckWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		wait      time.Duration
		down      int // asks answered 503 before the bucket is found
		missing   bool
		wantErr   string // "" wants nil
		wantAsks  int
		wantLeast time.Duration
	}{
		{name: "up after two asks", wait: 10 * time.Second, down: 2, wantAsks: 3, wantLeast: 2 * time.Second},
		{name: "down throughout", wait: 1500 * time.Millisecond, down: 1 << 30, wantErr: "cannot be reached", wantAsks: 2, wantLeast: time.Second},
		{name: "no wait asks once", down: 1 << 30, wantErr: "cannot be reached", wantAsks: 1},
		{name: "missing bucket", wait: 10 * time.Second, missing: true, wantErr: "does not exist", wantAsks: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var asks atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodHead {
					http.NotFound(w, r) // the cluster health check: not MinIO
					return
				}
				switch n := int(asks.Add(1)); {
				case n <= tt.down:
					w.WriteHeader(http.StatusServiceUnavailable)
				case tt.missing:
					w.WriteHeader(http.StatusNotFound)
				}
			}))
			defer srv.Close()
			d, err := s3store.NewDriver(t.Context(), s3store.Config{Bucket: "b", Endpoint: srv.URL, UsePathStyle: true, Region: "us-east-1",
				AccessKeyID: "k", SecretAccessKey: "s", MaxAttempts: 1, EndpointCooldown: time.Millisecond, CheckWait: tt.wait})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = d.Check(t.Context())
			took := time.Since(start)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Check = %v, want it to say %q", err, tt.wantErr)
			case tt.wantErr == "cannot be reached" && !errors.Is(err, s3store.ErrUnreachable):
				t.Fatalf("Check = %v, want ErrUnreachable", err)
			}
			if got := int(asks.Load()); got != tt.wantAsks {
				t.Errorf("%d asks, want %d", got, tt.wantAsks)
			}
			if took < tt.wantLeast {
				t.Errorf("Check returned after %s, want at least %s", took, tt.wantLeast)
			}
		})
	}
}
