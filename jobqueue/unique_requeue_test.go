package jobqueue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestUniqueRequeueBesideNewerGeneration: a unique job buried DEAD lets a
// newer generation in; requeuing the DEAD one while the newer is live is
// refused (JOB_EXISTS, nothing written), so one uniqueness never has two
// live jobs; once the newer one ended, the requeue goes through.
func TestUniqueRequeueBesideNewerGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	fail := true
	q := newQueue(t, s, clk, func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
			if fail {
				return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("bounced"))
			}
			return sent(ctx, j)
		})}}
	})
	key := lifecycle.Unique{Key: "nightly"}
	old, err := q.InsertJob(ctx, uniqueJob(emailType, `{}`, key))
	if err != nil {
		t.Fatal(err)
	}
	runOne := func() {
		t.Helper()
		c := claim(t, q, "w")
		if c == nil {
			t.Fatal("nothing to claim")
		}
		if _, err := c.Run(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	runOne()
	if j := get(t, q, old.JobID); j.Status != lifecycle.JobDead {
		t.Fatalf("the first job is %s, want DEAD", j.Status)
	}
	newer, err := q.InsertJob(ctx, uniqueJob(emailType, `{}`, key))
	if err != nil || newer.Duplicate || newer.JobID == old.JobID {
		t.Fatalf("insert past a DEAD holder: %s dup %v, %v; want a newer generation", newer.JobID, newer.Duplicate, err)
	}
	if _, err := q.Requeue(ctx, lifecycle.ActorAdmin, old.JobID); !errors.Is(err, lifecycle.ErrJobExists) {
		t.Fatalf("requeue of the DEAD one beside the QUEUED newer: %v; want JOB_EXISTS", err)
	}
	if j := get(t, q, old.JobID); j.Status != lifecycle.JobDead {
		t.Fatalf("the refused requeue moved the job to %s", j.Status)
	}
	if ids := laneIDs(t, s, "_type."+string(emailType)); len(ids) != 1 || ids[0] != newer.JobID {
		t.Fatalf("lane = %v; want the newer job alone", ids)
	}
	fail = false
	runOne()
	if j, err := q.Requeue(ctx, lifecycle.ActorAdmin, old.JobID); err != nil || j.Status != lifecycle.JobQueued {
		t.Fatalf("requeue once the newer completed: %v, %v", j.Status, err)
	}
}

// TestUniqueStatesAreTheInsertsView: the states are not part of what is
// the same job: two inserts of one key naming other states meet the same
// job, each judging it by its own states (the job holds it for one, not
// for the other, which lets a newer generation in).
func TestUniqueStatesAreTheInsertsView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := uniqueQueue(t, memstore.New(), clock.NewFake(t0))
	waiting := lifecycle.Unique{Key: "k", States: []lifecycle.JobState{lifecycle.JobQueued}}
	anyState := lifecycle.Unique{Key: "k"}
	a, err := q.InsertJob(ctx, uniqueJob(emailType, `{}`, waiting))
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.InsertJob(ctx, uniqueJob(emailType, `{}`, anyState))
	if err != nil || !b.Duplicate || b.JobID != a.JobID {
		t.Fatalf("other states, the holder QUEUED: %s dup %v, %v; want the first job", b.JobID, b.Duplicate, err)
	}
	if c := claim(t, q, "w"); c == nil {
		t.Fatal("nothing to claim")
	} else if _, err := c.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := q.InsertJob(ctx, uniqueJob(emailType, `{}`, anyState)); err != nil || !c.Duplicate {
		t.Fatalf("the default states, the holder COMPLETE: %s dup %v, %v; want a duplicate", c.JobID, c.Duplicate, err)
	}
	if d, err := q.InsertJob(ctx, uniqueJob(emailType, `{}`, waiting)); err != nil || d.Duplicate || d.JobID == a.JobID {
		t.Fatalf("QUEUED only, the holder COMPLETE: %s dup %v, %v; want a newer generation", d.JobID, d.Duplicate, err)
	}
}
