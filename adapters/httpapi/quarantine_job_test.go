package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// TestQuarantinedJobIsGone (issue 18 defect 7): a job whose record was
// quarantined answers 410 RECORD_QUARANTINED on every later read, as a
// quarantined run does, not 404 JOB_NOT_FOUND.
func TestQuarantinedJobIsGone(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{})
	ctx := context.Background()
	gw := g.client(lifecycle.ActorGateway)
	if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: "job-q", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "quick"}); err != nil {
		t.Fatal(err)
	}
	key, _ := layout.JobKey("job-q")
	if _, err := g.store.Put(ctx, key, []byte("{garbage"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the read that quarantines it, and a later one
		_, err := gw.Job(ctx, "job-q")
		apiError(t, err, http.StatusGone, codes.RecordQuarantined)
		if !errors.Is(err, lifecycle.ErrCorrupt) {
			t.Errorf("read %d: %v does not match storage.ErrCorrupt", i, err)
		}
	}
	_, err := g.client(lifecycle.ActorAdmin).Requeue(ctx, "job-q")
	apiError(t, err, http.StatusGone, codes.RecordQuarantined)
}
