package jobqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// landsUnknown lets the first create of a job record land and answers it
// as ErrOutcomeUnknown (its answer lost); refuse answers it, without
// landing, with a failed condition instead.
type landsUnknown struct {
	driver.Store
	refuse bool
	done   bool
}

func (s *landsUnknown) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if s.done || !strings.HasPrefix(key, layout.JobsPrefix) {
		return s.Store.Put(ctx, key, value, cond)
	}
	s.done = true
	if s.refuse {
		return "", storage.ErrPreconditionFailed
	}
	if _, err := s.Store.Put(ctx, key, value, cond); err != nil {
		return "", err
	}
	return "", storage.ErrOutcomeUnknown
}

// TestEnqueueKeepsTheLaneOfAJobThatMayExist: an Enqueue whose job write
// answers "outcome unknown" fails, but the job it may have written keeps
// its lane entry, so it runs; one whose write certainly did not land
// leaves no entry. Before, both removed the entry, and a job that landed
// sat in no lane, named by no lock, never claimed.
func TestEnqueueKeepsTheLaneOfAJobThatMayExist(t *testing.T) {
	t.Parallel()
	for _, refuse := range []bool{false, true} {
		d := &landsUnknown{Store: memstore.NewDriver(), refuse: refuse}
		s := storage.New(d)
		q := newQueue(t, s, clock.NewFake(t0))
		_, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, spec("job-1", "a"))
		want := storage.ErrOutcomeUnknown
		if refuse {
			want = lifecycle.ErrJobExists
		}
		if !errors.Is(err, want) {
			t.Fatalf("refuse=%v: Enqueue = %v; want %v", refuse, err, want)
		}
		lane := laneIDs(t, s, "a")
		if refuse && len(lane) != 0 {
			t.Errorf("a job that did not land left lane entries %v", lane)
		}
		if !refuse {
			if len(lane) != 1 || lane[0] != "job-1" {
				t.Errorf("lane of a job that landed = %v; want [job-1]", lane)
			}
			if _, err := q.Job(context.Background(), "job-1"); err != nil {
				t.Errorf("the job that landed: %v", err)
			}
		}
	}
}
