package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// MaxLaneLocks is the most lane locks one Lanes call reads: lanes past it
// (in name order) are listed with their depth and Running false.
const MaxLaneLocks = 500

// laneStates is Operator.Lanes: the ready lanes' depths (Depths) and, for
// each lane's lock, whether it holds a running job. A held lock names its
// job; the job is read only to tell a lock still held after its job ended
// (a claim keeps it a moment) from one whose job runs: one read per busy
// lane, never one per job. Functions, not methods: the Queue's methods are
// its public face (surface_test.go's cap).
func laneStates(ctx context.Context, q *Queue) ([]lifecycle.QueueLane, error) {
	depths, err := q.lanes.depths(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.QueueLane, 0, len(depths))
	for _, d := range depths {
		out = append(out, lifecycle.QueueLane{Agent: d.Agent, Ready: d.Ready, Waiting: d.Waiting, OldestReadyMS: d.Age.Milliseconds()})
	}
	byAgent := make(map[string]int, len(out)) // index in out
	for i := range out {
		byAgent[out[i].Agent] = i
	}
	var read int
	for key, err := range q.reads.store.List(ctx, layout.AgentLocksPrefix) {
		if err != nil {
			return nil, err
		}
		agent, _, ok := layout.ParseSlotLockKey(key)
		if !ok {
			continue
		}
		var job string
		if read < MaxLaneLocks {
			read++
			if job, err = runningJob(ctx, q, key); err != nil {
				return nil, err
			}
		}
		i, ok := byAgent[agent]
		if !ok {
			i = len(out)
			out = append(out, lifecycle.QueueLane{Agent: agent})
			byAgent[agent] = i
		}
		if d := &out[i]; job != "" {
			d.RunningJobs++
			if d.JobID == "" || job < d.JobID {
				d.JobID = job
			}
			d.Running = true
		}
	}
	paused := map[string]bool{}
	for key, err := range q.reads.store.List(ctx, layout.PausedQueuesPrefix) {
		if err != nil {
			return nil, err
		}
		if name, ok := layout.QueueFromPausedKey(key); ok {
			paused[name] = true
		}
	}
	for i := range out {
		out[i].Queue = laneQueue(out[i].Agent)
		out[i].Paused = paused[out[i].Queue]
	}
	slices.SortFunc(out, func(a, b lifecycle.QueueLane) int { return strings.Compare(a.Agent, b.Agent) })
	return out, nil
}

// runningJob is the id of the job that runs under the lock at key, ""
// when none does.
func runningJob(ctx context.Context, q *Queue, key string) (string, error) {
	raw, _, err := q.reads.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var l agentLock
	if json.Unmarshal(raw, &l) != nil || l.free(q.clock.Now()) || l.JobID == "" {
		return "", nil // a poison lock is the claim's to quarantine
	}
	d, _, err := q.reads.jobs.read(ctx, l.JobID)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if idle(d.Status) || d.RanEpoch == l.Epoch {
		return "", nil
	}
	return l.JobID, nil
}
