package nlm_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/storage"
)

// TestTakeover: a job whose processor was lost (its lease lapsed) is taken
// over with epoch+1 and resumed, or sent to ERROR after MaxTakeovers; a
// live lease is left alone.
func TestTakeover(t *testing.T) {
	t.Parallel()
	id := "job-t"
	tests := []struct {
		name      string
		status    lifecycle.NLMState
		lease     *lifecycle.Lease
		takeovers int
		artifact  bool
		want      lifecycle.NLMState
		queries   int64 // stage runs of Query
		wantErr   string
	}{
		{"lost in NLM_QUERY: replayed and resumed", lifecycle.NLMQuery, &lifecycle.Lease{Owner: "dead", Epoch: 3, ExpiresAt: t0}, 0, false, lifecycle.NLMDone, 1, ""},
		{"lost in CALLBACK: the callback only", lifecycle.NLMCallback, &lifecycle.Lease{Owner: "dead", Epoch: 1, ExpiresAt: t0}, 1, true, lifecycle.NLMDone, 0, ""},
		{"lost too often: ERROR", lifecycle.NLMStructuring, &lifecycle.Lease{Owner: "dead", Epoch: 5, ExpiresAt: t0}, 2, false, lifecycle.NLMError, 0, "taken over 3 times"},
		{"live lease: left alone", lifecycle.NLMQuery, &lifecycle.Lease{Owner: "alive", Epoch: 1, ExpiresAt: t0.Add(time.Hour)}, 0, false, lifecycle.NLMQuery, 0, "lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := memstore.New()
			req := request("https://cb.example/r", id)
			req.ProjectID = "default"
			job := lifecycle.NLMJob{JobID: id, Status: tt.status, Request: &req, Lease: tt.lease, Takeovers: tt.takeovers, CreatedAt: t0, UpdatedAt: t0}
			if tt.artifact {
				job.ArtifactID = artifact.IDForJob(id)
			}
			b, _ := json.Marshal(job)
			if _, err := s.Put(ctx, "nlm/jobs/"+id+".json", b, storage.IfNotExists()); err != nil {
				t.Fatal(err)
			}
			var queries atomic.Int64
			stages := stagesFailingAt("")
			query := stages.Query
			stages.Query = func(ctx context.Context, r lifecycle.NLMRequest, prompt string) (json.RawMessage, error) {
				queries.Add(1)
				return query(ctx, r, prompt)
			}
			post := newPoster(nil)
			p := newProcessor(t, nlm.Config{Store: s, Clock: clock.NewFake(t0.Add(time.Minute)), Owner: "heir", Client: post}, stages)
			got, err := p.Process(ctx, id)
			if tt.wantErr != "" && tt.want != lifecycle.NLMError {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Process = %+v, %v; want an error about %s", got, err, tt.wantErr)
				}
				got, _ = p.Get(ctx, id)
				if got.Status != tt.want || got.Lease.Owner != "alive" {
					t.Fatalf("job %+v, want it untouched", got)
				}
				return
			}
			if err != nil || got.Status != tt.want || got.Takeovers != tt.takeovers+1 || got.Lease != nil {
				t.Fatalf("Process = %+v, %v; want %s after takeover %d", got, err, tt.want, tt.takeovers+1)
			}
			if tt.wantErr != "" && !strings.Contains(got.Error, tt.wantErr) {
				t.Fatalf("error %q, want %q", got.Error, tt.wantErr)
			}
			if n := queries.Load(); n != tt.queries {
				t.Fatalf("Query ran %d times, want %d", n, tt.queries)
			}
			if cb := post.all(); len(cb) != 1 || (tt.want == lifecycle.NLMDone) != (cb[0].Status == "COMPLETE") {
				t.Fatalf("callbacks %+v", cb)
			}
		})
	}
}
