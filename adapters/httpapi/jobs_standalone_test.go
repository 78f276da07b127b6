package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestEnqueueStandAloneJob: POST /jobs needs only job_type; the job, with
// no run and no agent, runs in its type's lane. The caller's actor still
// meets the authority matrix: the frontend may not enqueue one.
func TestEnqueueStandAloneJob(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	tests := []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"gateway, type only", "tok-gateway", `{"job_id":"job-s","job_type":"BRIEF"}`, http.StatusCreated, ""},
		{"gateway, type and payload", "tok-gateway", `{"job_type":"RESEARCH","payload":{"q":"violins"}}`, http.StatusCreated, ""},
		{"frontend", "tok-frontend", `{"job_type":"BRIEF"}`, http.StatusForbidden, codes.Forbidden},
		{"no type", "tok-gateway", `{"run_id":"r","agent_slug":"quick"}`, http.StatusBadRequest, codes.InvalidRequest},
		{"reserved lane as agent", "tok-gateway", `{"job_type":"BRIEF","agent_slug":"_type.BRIEF"}`, http.StatusBadRequest, codes.InvalidRequest},
	}
	for _, tt := range tests {
		status, _, body := g.raw("POST", "/jobs", tt.token, "application/json", []byte(tt.body), nil)
		if status != tt.status {
			t.Fatalf("%s: %d %s, want %d", tt.name, status, body, tt.status)
		}
		if tt.code != "" {
			var e struct{ Code string }
			if err := json.Unmarshal(body, &e); err != nil || e.Code != tt.code {
				t.Fatalf("%s: %s, want code %s", tt.name, body, tt.code)
			}
			continue
		}
		var j lifecycle.Job
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatal(err)
		}
		if j.RunID != "" || j.AgentSlug != "_type."+string(j.JobType) || j.Status != lifecycle.JobQueued {
			t.Fatalf("%s: enqueued %+v", tt.name, j)
		}
	}
}
