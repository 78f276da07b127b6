package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// pauseRefresh is how often a Queue that claims lists the paused queues:
// how soon a Worker obeys a pause or a resume written by another process.
// The process that writes one obeys it at once.
const pauseRefresh = time.Second

// rollingRefusal is what a Queue refuses while Config.RollingUpgrade is
// on because Workers of the previous release sharing its store would not
// obey it (a paused queue): ErrInvalidConfig, code CONFLICT.
type rollingRefusal struct{ what string }

func (e *rollingRefusal) Error() string {
	return fmt.Sprintf("%v: %s is refused during a rolling upgrade (RollingUpgrade): a Worker of the previous release would not obey it", ErrInvalidConfig, e.what)
}
func (e *rollingRefusal) Is(target error) bool { return target == ErrInvalidConfig }
func (e *rollingRefusal) Code() string         { return codes.Conflict }

// pausedRecord is a paused queue's record (layout.PausedQueueKey): the
// queue is paused while it exists, whatever it holds; the members say who
// paused it and when, for the page.
type pausedRecord struct {
	Queue    string    `json:"queue"`
	PausedAt time.Time `json:"paused_at"`
	Actor    string    `json:"actor,omitempty"`
}

// pauses is the queues' pause state: written by Pause and Resume, listed
// by claims at most once per pauseRefresh. A queue seen paused is believed
// resumed only once its record is confirmed missing (evidence.Absence: two
// listings a settle time apart on a store that settles), so a listing that
// misses the record for a moment starts nothing.
type pauses struct {
	store   *storage.Store
	clock   clock.Clock
	log     *slog.Logger
	sched   *scheduler
	absent  *evidence.Absence
	rolling bool

	mu       sync.Mutex
	listedAt time.Time
	paused   map[string]bool
}

// isPaused tells whether queue is paused, as last listed or written here.
func (q *pauses) isPaused(queue string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.paused[queue]
}

// refresh lists the paused queues, at most once per pauseRefresh.
func (q *pauses) refresh(ctx context.Context) error {
	now := q.clock.Now()
	q.mu.Lock()
	fresh := !q.listedAt.IsZero() && now.Sub(q.listedAt) < pauseRefresh && !now.Before(q.listedAt)
	if !fresh {
		q.listedAt = now
	}
	q.mu.Unlock()
	if fresh {
		return nil
	}
	listed := map[string]bool{}
	for key, err := range q.store.List(ctx, layout.PausedQueuesPrefix) {
		if err != nil {
			return err
		}
		if name, ok := layout.QueueFromPausedKey(key); ok {
			listed[name] = true
			q.absent.Found(key)
		}
	}
	var resumed []string
	q.mu.Lock()
	if q.paused == nil {
		q.paused = map[string]bool{}
	}
	for name := range q.paused {
		key, _ := layout.PausedQueueKey(name)
		if !listed[name] && q.absent.Confirmed(key, now) {
			delete(q.paused, name)
			resumed = append(resumed, name)
		}
	}
	for name := range listed {
		q.paused[name] = true
	}
	q.mu.Unlock()
	q.wakeQueues(resumed, now)
	return nil
}

// set records a pause or resume this process wrote: obeyed at once.
func (q *pauses) set(name string, paused bool) {
	q.mu.Lock()
	if q.paused == nil {
		q.paused = map[string]bool{}
	}
	if paused {
		q.paused[name] = true
	} else {
		delete(q.paused, name)
	}
	q.mu.Unlock()
	if !paused {
		q.wakeQueues([]string{name}, q.clock.Now())
	}
}

// wakeQueues schedules a look at every lane of the queues named.
func (q *pauses) wakeQueues(names []string, now time.Time) {
	if len(names) == 0 {
		return
	}
	for _, a := range q.sched.all() {
		if slices.Contains(names, laneQueue(a.name)) {
			q.sched.schedule(a, now)
		}
	}
}

// pause writes queue's record (Queue.Pause).
func (q *pauses) pause(ctx context.Context, actor lifecycle.Actor, name string) error {
	key, err := q.check(actor, name)
	if err != nil {
		return err
	}
	if q.rolling {
		return &rollingRefusal{what: "pausing a queue"}
	}
	b, err := json.Marshal(pausedRecord{Queue: name, PausedAt: q.clock.Now().UTC(), Actor: string(actor)})
	if err != nil {
		return err
	}
	if _, err := q.store.Put(ctx, key, b, storage.Condition{}); err != nil {
		return err
	}
	q.set(name, true)
	return nil
}

// resume deletes queue's record (Queue.Resume).
func (q *pauses) resume(ctx context.Context, actor lifecycle.Actor, name string) error {
	key, err := q.check(actor, name)
	if err != nil {
		return err
	}
	if err := q.store.Delete(ctx, key, storage.Condition{}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	q.set(name, false)
	return nil
}

// check refuses an actor that may not pause (the admin's, as requeue and
// cancel) and a name that is no queue's, and returns the record's key.
func (q *pauses) check(actor lifecycle.Actor, name string) (string, error) {
	if err := authority.Check(actor, authority.Jobs, authority.UpdateStatus, authority.Scope{}); err != nil {
		return "", err
	}
	if err := validQueueName(name); err != nil {
		return "", fmt.Errorf("%w: %w", lifecycle.ErrInvalidInput, err)
	}
	return layout.PausedQueueKey(name)
}
