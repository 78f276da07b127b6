package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// TestTenantJobs: a job inserted for a tenant carries it, so does its
// artifact; another tenant's calls find neither it nor its uniqueness;
// and a tenant may not choose a job's id.
func TestTenantJobs(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	q, err := jobqueue.New(jobqueue.Config{Store: memstore.New(), Types: map[lifecycle.JobType]jobqueue.TypeConfig{
		"GREET": {Handler: jobqueue.Typed(func(context.Context, struct{}) (string, error) { return "hi", nil })},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := &jobqueue.Worker{Queue: q, ID: "worker-1"}
	wctx, stopWorker := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	defer func() { stopWorker(); <-stopped }()

	acme, bolt := lifecycle.WithTenant(ctx, "acme"), lifecycle.WithTenant(ctx, "bolt")
	job, err := q.InsertJob(acme, jobqueue.NewJob{JobType: "GREET", Payload: json.RawMessage(`{}`)})
	if err != nil || job.TenantID != "acme" {
		t.Fatalf("insert: %+v, %v", job, err)
	}
	if _, err := q.Wait(bolt, job.JobID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("bolt waits for acme's job: %v", err)
	}
	if done, err := q.Wait(acme, job.JobID); err != nil || done.Status != lifecycle.JobComplete || done.TenantID != "acme" {
		t.Fatalf("the job ran: %+v, %v", done, err)
	}
	if res, err := q.Result(acme, job.JobID); err != nil || res.TenantID != "acme" {
		t.Fatalf("its artifact: %+v, %v", res, err)
	}
	for name, c := range map[string]context.Context{"bolt": bolt, "the default tenant": ctx} {
		if _, err := q.Get(c, lifecycle.ActorAdmin, job.JobID); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s reads acme's job: %v", name, err)
		}
		if _, err := q.Cancel(c, lifecycle.ActorAdmin, job.JobID); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s cancels acme's job: %v", name, err)
		}
		if p, err := q.ListPage(c, lifecycle.ActorAdmin, jobqueue.JobQuery{}); err != nil || len(p.Jobs) != 0 {
			t.Errorf("%s lists %d jobs, %v", name, len(p.Jobs), err)
		}
		for j, err := range q.List(c, lifecycle.ActorAdmin) {
			if err != nil || j.TenantID == "acme" {
				t.Errorf("%s's List yields %s of %q, %v", name, j.JobID, j.TenantID, err)
			}
		}
	}
	if got, err := q.Get(acme, lifecycle.ActorAdmin, job.JobID); err != nil || got.JobID != job.JobID {
		t.Errorf("acme reads its job: %v", err)
	}
	// One uniqueness in two tenants is two jobs; in one, one.
	unique := jobqueue.NewJob{JobType: "GREET", Payload: json.RawMessage(`{}`), Unique: &lifecycle.Unique{Key: "k"}}
	a1, err1 := q.InsertJob(acme, unique)
	a2, err2 := q.InsertJob(acme, unique)
	b1, err3 := q.InsertJob(bolt, unique)
	if err := errors.Join(err1, err2, err3); err != nil || a1.JobID != a2.JobID || !a2.Duplicate || b1.JobID == a1.JobID || b1.Duplicate {
		t.Errorf("unique across tenants: acme %s then %s (duplicate %v), bolt %s (duplicate %v): %v", a1.JobID, a2.JobID, a2.Duplicate, b1.JobID, b1.Duplicate, err)
	}
	if _, err := q.InsertJob(bolt, jobqueue.NewJob{JobID: job.JobID, JobType: "GREET", Payload: json.RawMessage(`{}`)}); !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Errorf("bolt names acme's job id: %v, want ErrInvalidJob", err)
	}
}
