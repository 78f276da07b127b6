package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// uniqueGen splits a unique job's id into its uniqueness's hash and its
// generation; ok false for any other id.
func uniqueGen(id string) (hash string, gen int, ok bool) {
	rest, ok := strings.CutPrefix(id, uniquePrefix)
	if !ok {
		return "", 0, false
	}
	hash, g, dotted := strings.Cut(rest, ".")
	if len(hash) != 32 {
		return "", 0, false
	}
	if !dotted {
		return hash, 0, true
	}
	n, err := strconv.Atoi(g)
	if err != nil || n < 1 || n >= maxGenerations {
		return "", 0, false
	}
	return hash, n, true
}

// liveState tells whether a job in s waits or runs: not at an end
// (COMPLETE, CANCELLED, DEAD) nor FAILED (buried at once).
func liveState(s lifecycle.JobState) bool {
	switch s {
	case lifecycle.JobComplete, lifecycle.JobCancelled, lifecycle.JobDead, lifecycle.JobFailed:
		return false
	}
	return true
}

// uniqueRequeueCheck refuses the requeue of a unique job while another
// generation of its uniqueness is live: a DEAD job let a newer one in,
// and bringing it back beside that one would make two live jobs of one
// uniqueness. The generations are read in turn up to the first missing
// (they are created in order). What stays open is an insert racing the
// requeue: it read this job DEAD just before the requeue and creates the
// next generation just after this check.
func (q *admission) uniqueRequeueCheck(ctx context.Context, jobID string) error {
	hash, self, ok := uniqueGen(jobID)
	if !ok {
		return nil
	}
	for gen := 0; gen < maxGenerations; gen++ {
		if gen == self {
			continue
		}
		id := uniqueID(hash, gen)
		d, _, err := q.jobs.read(ctx, id)
		switch {
		case errors.Is(err, storage.ErrNotFound) && gen > self:
			return nil
		case errors.Is(err, storage.ErrNotFound):
			continue // an earlier generation retention deleted
		case err != nil:
			return err
		case liveState(d.Status):
			return fmt.Errorf("%w: %s is %s, of the same uniqueness as %s: requeue one at a time (cancel it, or let it end, first)",
				lifecycle.ErrJobExists, id, d.Status, jobID)
		}
	}
	return nil
}
