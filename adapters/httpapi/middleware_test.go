package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestInsertMiddlewareOverHTTP: POST /jobs and /jobs/batch go through the
// queue's insert middleware, and its refusal is answered with its code's
// status: a job without a tenant is INVALID_INPUT (400), a panic
// INTERNAL_ERROR (500), and nothing is written.
func TestInsertMiddlewareOverHTTP(t *testing.T) {
	t.Parallel()
	tenants := func(next jobqueue.InsertFunc) jobqueue.InsertFunc {
		return func(ctx context.Context, jobs []jobqueue.NewJob) ([]lifecycle.Job, error) {
			for i, j := range jobs {
				switch {
				case bytes.Contains(j.Payload, []byte(`"panic"`)):
					panic("tenant table missing")
				case !bytes.Contains(j.Payload, []byte(`"tenant"`)):
					return nil, fmt.Errorf("%w: job %d names no tenant", lifecycle.ErrInvalidInput, i)
				}
			}
			return next(ctx, jobs)
		}
	}
	g := newRig(t, rigOpts{queue: func(c *jobqueue.Config) {
		c.InsertMiddleware = []func(jobqueue.InsertFunc) jobqueue.InsertFunc{tenants}
	}})
	tests := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"a job with a tenant", "/jobs", `{"job_id":"ok-1","job_type":"BRIEF","payload":{"tenant":"t1"}}`, http.StatusCreated, ""},
		{"a job without", "/jobs", `{"job_id":"no-1","job_type":"BRIEF","payload":{}}`, http.StatusBadRequest, codes.InvalidInput},
		{"a batch with one without", "/jobs/batch", `{"jobs":[{"job_id":"ok-2","job_type":"BRIEF","payload":{"tenant":"t1"}},{"job_id":"no-2","job_type":"BRIEF"}]}`, http.StatusBadRequest, codes.InvalidInput},
		{"a panic", "/jobs", `{"job_id":"no-3","job_type":"BRIEF","payload":{"panic":1}}`, http.StatusInternalServerError, codes.InternalError},
	}
	for _, tt := range tests {
		status, _, body := g.raw("POST", tt.path, "tok-gateway", "application/json", []byte(tt.body), nil)
		if status != tt.status {
			t.Fatalf("%s: %d %s, want %d", tt.name, status, body, tt.status)
		}
		if tt.code != "" {
			var e struct{ Code string }
			if err := json.Unmarshal(body, &e); err != nil || e.Code != tt.code {
				t.Fatalf("%s: %s, want code %s", tt.name, body, tt.code)
			}
		}
	}
	for _, id := range []string{"no-1", "ok-2", "no-2", "no-3"} {
		if status, _, _ := g.raw("GET", "/jobs/"+id, "tok-admin", "", nil, nil); status != http.StatusNotFound {
			t.Errorf("job %s: GET %d, want 404: a refused insert wrote it", id, status)
		}
	}
}
