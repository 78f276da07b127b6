package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/records"
)

// slots are the agents' concurrency slots in the store, and the runs that
// wait here for one: a run executes only while it holds a slot of its
// agent. This runner remembers the slots its executions hold (held) and
// the version of each it freed (freed), so taking one again is one
// compare-and-swap without a read.
type slots struct {
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	cat      *catalog
	statuses *statuses
	absent   *core.Absence
	poison   *poison
	execs    *executions
	inbox    *inbox

	mu      sync.Mutex
	waiting map[string][]candidate // by agent
	freed   map[string]storage.Version
	held    map[string]string // slot key -> run id
}

// wait queues c until a slot of its agent frees.
func (s *slots) wait(c candidate) {
	s.mu.Lock()
	s.waiting[c.slug] = append(s.waiting[c.slug], c)
	s.mu.Unlock()
}

// takeWaiting empties the queues of runs waiting for a slot.
func (s *slots) takeWaiting() map[string][]candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiting
	s.waiting = map[string][]candidate{}
	return w
}

// freeRun frees what a quarantined run held here: its execution is stopped
// (its finish frees its slot), or else every slot that names it.
func (s *slots) freeRun(ctx context.Context, slug, runID string, cause error) {
	if !s.execs.stop(runID, cause) {
		s.freeAllOf(ctx, slug, runID)
	}
}

// acquire takes one of the agent's concurrency slots for runID: one this
// runner freed (a compare-and-swap on the version it wrote, no read), a new
// one (create-only), the one the run already holds (an orphan's), a freed
// one, or one whose run no longer executes. Slots are freed by writing an
// empty holder, never deleted: S3 compare-and-swap writes are atomic where a
// conditional delete on MinIO is not.
func (s *slots) acquire(ctx context.Context, slug, runID string) (string, storage.Version, error) {
	n := s.cat.agents[slug].concurrency
	body := slotBody(runID)
	keys := make([]string, n)
	for i := range n {
		key, err := layout.RunSlotKey(slug, i)
		if err != nil {
			return "", "", err
		}
		keys[i] = key
	}
	// Slots this runner's own executions hold need no look.
	s.mu.Lock()
	var open []string
	for _, key := range keys {
		if _, held := s.held[key]; !held {
			open = append(open, key)
		}
	}
	s.mu.Unlock()
	if len(open) == 0 {
		return "", "", errNoSlot
	}
	take := func(key string, v storage.Version) (string, storage.Version, error) {
		s.mu.Lock()
		s.held[key] = runID
		s.mu.Unlock()
		return key, v, nil
	}
	for _, key := range open {
		s.mu.Lock()
		v, ok := s.freed[key]
		delete(s.freed, key)
		s.mu.Unlock()
		if !ok {
			continue
		}
		if v, err := s.store.Put(ctx, key, body, storage.IfMatch(v)); err == nil {
			return take(key, v)
		}
	}
	for _, key := range open {
		v, err := s.store.Put(ctx, key, body, storage.IfNotExists())
		if err == nil {
			return take(key, v)
		}
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return "", "", err
		}
	}
	for _, key := range open {
		e, v, err := s.read(ctx, key) // a junk slot is quarantined: not found
		if errors.Is(err, storage.ErrNotFound) {
			if v, err := s.store.Put(ctx, key, body, storage.IfNotExists()); err == nil {
				return take(key, v)
			}
			continue
		}
		if err != nil {
			return "", "", err
		}
		// The slot may still name this run after its runner was lost:
		// rewrite it all the same, so the lost runner's release (a
		// compare-and-swap on the version it wrote) is fenced off.
		if e.RunID == runID || e.RunID == "" || s.holderGone(ctx, slug, e.RunID) {
			if v, err := s.store.Put(ctx, key, body, storage.IfMatch(v)); err == nil {
				return take(key, v)
			}
		}
	}
	return "", "", errNoSlot
}

// holderGone tells whether the run holding a slot no longer executes
// (it ended, parked, or never started), so the slot may be taken.
func (s *slots) holderGone(ctx context.Context, slug, runID string) bool {
	if s.execs.isExecuting(runID) {
		return false
	}
	key, err := layout.RunStatusKey(slug, runID)
	if err != nil {
		return true
	}
	doc, _, err := s.statuses.read(ctx, slug, runID, key)
	if errors.Is(err, records.ErrCorrupt) {
		return true // poison and quarantined
	}
	if errors.Is(err, storage.ErrNotFound) {
		// Gone; on a store that settles, once a read Settle later agrees.
		return s.absent.Confirmed(key, s.now())
	}
	if err != nil {
		return false
	}
	f := s.cat.flowOfDoc(&doc)
	return !f.executing(doc.Status) || doc.Lease == nil
}

// release frees a slot this runner holds at version v, unless another
// runner took it meanwhile, and wakes the next run waiting for one.
func (s *slots) release(ctx context.Context, slug, key string, v storage.Version) {
	if key == "" {
		return
	}
	s.mu.Lock()
	delete(s.held, key)
	s.mu.Unlock()
	free, err := s.store.Put(ctx, key, slotBody(""), storage.IfMatch(v))
	switch {
	case err == nil:
		s.mu.Lock()
		s.freed[key] = free
		s.mu.Unlock()
	case !errors.Is(err, storage.ErrPreconditionFailed):
		s.log.LogAttrs(ctx, slog.LevelWarn, "slot_release_failed", slog.String("slot", key), slog.String("error", err.Error()))
	}
	s.mu.Lock()
	next := s.waiting[slug]
	if len(next) > 0 {
		s.waiting[slug] = next[1:]
	}
	s.mu.Unlock()
	if len(next) > 0 {
		s.inbox.hand(next[0])
	}
}

// freeAllOf frees every slot of the agent that names runID.
func (s *slots) freeAllOf(ctx context.Context, slug, runID string) {
	a, ok := s.cat.agents[slug]
	if !ok {
		return
	}
	for i := range a.concurrency {
		key, err := layout.RunSlotKey(slug, i)
		if err != nil {
			return
		}
		e, v, err := s.read(ctx, key)
		if err != nil || e.RunID != runID {
			continue
		}
		s.release(ctx, slug, key, v)
	}
}

// read reads and validates a slot object; a junk one is quarantined
// and reported as not found, so the slot can be created afresh.
func (s *slots) read(ctx context.Context, key string) (slotEntry, storage.Version, error) {
	b, v, err := s.store.Get(ctx, key)
	if err != nil {
		return slotEntry{}, "", err
	}
	var e slotEntry
	var ce *records.CorruptError
	if err := json.Unmarshal(b, &e); err != nil {
		ce = &records.CorruptError{Key: key, Version: v, Data: b, Reason: "cannot decode", Err: err}
	} else if e.RunID != "" {
		if err := storekey.ValidateID("run id", e.RunID); err != nil {
			ce = &records.CorruptError{Key: key, Version: v, Data: b, Reason: "invalid", Err: err}
		}
	}
	if ce != nil {
		if _, qerr := s.poison.quarantine(ctx, ce); qerr != nil {
			return slotEntry{}, "", qerr
		}
		return slotEntry{}, "", fmt.Errorf("%w: slot %s quarantined", storage.ErrNotFound, key)
	}
	return e, v, nil
}

// releaseHeld frees the slot an execution holds.
func (s *slots) releaseHeld(ctx context.Context, x *execution) {
	s.release(ctx, x.agent.Slug, x.slotKey, x.slotVer)
}

func (s *slots) isWaiting(slug, runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.waiting[slug] {
		if c.w.runID == runID {
			return true
		}
	}
	return false
}
