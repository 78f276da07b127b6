package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// written is a record of the simulated history: its keys, its kind, and
// when it becomes eligible under the test's config (zero: never).
type written struct {
	kind     retention.Kind
	keys     []string
	eligible time.Time
	// late is how much later than a pass after eligible it may be deleted
	// (an idempotency record read through its expiry index waits for the
	// end of its entry's hour).
	late time.Duration
}

// history writes records as the engines lay them out, and remembers them.
type history struct {
	t     testing.TB
	store *storage.Store
	cfg   retention.Config
	mu    sync.Mutex
	recs  []written
	n     int
}

func (h *history) put(key string, doc any) {
	h.t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.store.Put(context.Background(), key, b, storage.Condition{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *history) add(kind retention.Kind, at time.Time, keys ...string) {
	w := written{kind: kind, keys: keys}
	if a := h.cfg.AgeOf(kind); a >= 0 && !at.IsZero() {
		w.eligible = at.Add(a)
	}
	h.mu.Lock()
	h.recs = append(h.recs, w)
	h.mu.Unlock()
}

func (h *history) id(p string) string { h.n++; return fmt.Sprintf("%s%06d", p, h.n) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// run writes a run folder finished at end (still running when end is zero).
func (h *history) run(agent string, end time.Time, machine, status string) string {
	id := h.id("run-")
	st := lifecycle.RunStatus{RunID: id, AgentSlug: agent, Status: status, Machine: machine, Trigger: "manual", StartedAt: end.Add(-time.Minute)}
	if !end.IsZero() {
		st.FinishedAt = &end
	} else {
		st.StartedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	keys := []string{
		must(layout.RunStatusKey(agent, id)), must(layout.RunManifestKey(agent, id)), must(layout.RunInputKey(agent, id)),
		must(layout.RunStepKey(agent, id, 1, "fetch")), must(layout.RunStepKey(agent, id, 2, "write")),
		must(layout.RunOutputKey(agent, id, "proposal.json")), must(layout.RunIndexKey(id)),
	}
	for _, k := range keys[1:] {
		h.put(k, map[string]string{"run_id": id, "agent_slug": agent, "filler": "some bytes of a run's file"})
	}
	h.put(keys[0], st)
	if end.IsZero() {
		active := must(layout.RunActiveKey(agent, id))
		h.put(active, map[string]string{})
		keys = append(keys, active)
	}
	at := end
	if !lifecycle.RunFinished(machine, status) {
		at = time.Time{}
	}
	h.add(retention.Runs, at, keys...)
	return id
}

func (h *history) job(status lifecycle.JobState, updated time.Time) string {
	id := h.id("job-")
	key := must(layout.JobKey(id))
	h.put(key, lifecycle.Job{JobID: id, JobType: lifecycle.JobResearch, AgentSlug: "a", Status: status, CreatedAt: updated.Add(-time.Minute), UpdatedAt: updated})
	kind := retention.Jobs
	switch status {
	case lifecycle.JobDead:
		kind = retention.DeadJobs
	case lifecycle.JobComplete:
	default:
		updated = time.Time{}
	}
	h.add(kind, updated, key)
	return id
}

func (h *history) nlmJob(status lifecycle.NLMState, updated time.Time) {
	id := h.id("nlm-")
	key := must(layout.NLMJobKey(id))
	h.put(key, lifecycle.NLMJob{JobID: id, Status: status, CreatedAt: updated.Add(-time.Minute), UpdatedAt: updated})
	if status != lifecycle.NLMDone && status != lifecycle.NLMError {
		updated = time.Time{}
	}
	h.add(retention.Jobs, updated, key)
}

func (h *history) idempotency(status string, expires time.Time) {
	id := h.id("api:client:")
	key := layout.IdempotencyKey(id)
	h.put(key, idemrecord.Record{Key: id, Source: "api", Status: status, CreatedAt: expires.Add(-24 * time.Hour), UpdatedAt: expires.Add(-24 * time.Hour), ExpiresAt: expires})
	// Its expiry entry, as a submit files it: the janitor reads the
	// record once the entry's hour has ended.
	entry, _ := layout.IdempotencyExpiryKey(key, expires)
	h.put(entry, struct{}{})
	h.add(retention.Idempotency, expires, key, entry)
	h.mu.Lock()
	h.recs[len(h.recs)-1].late = expires.Truncate(time.Hour).Add(time.Hour).Sub(expires)
	h.mu.Unlock()
}

// marker writes a run marker of an idempotency key (a store that
// settles writes one per run of a key) that expires at expires.
func (h *history) marker(expires time.Time) {
	id := h.id("api:client:")
	runID := h.id("run_")
	key, err := layout.IdempotencyRunKey(id, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	h.put(key, idemrecord.Marker{Key: id, RunID: runID, CreatedAt: expires.Add(-24 * time.Hour), ExpiresAt: expires})
	h.add(retention.Idempotency, expires, key)
}

// expiredEntry writes an entry whose 72 h TTL ended at end.
func (h *history) expiredEntry(end time.Time) {
	id := h.id("entry-")
	key := must(layout.InboxExpiredKey(id))
	e := lifecycle.InboxEntry{ID: id, Status: lifecycle.InboxExpired, CreatedAt: end.Add(-72 * time.Hour)}
	e.Metadata.TTLHours = 72
	h.put(key, e)
	h.add(retention.Inbox, end, key)
}

func (h *history) audit(ts time.Time) {
	id := h.id("evt-")
	key := must(layout.AuditKey(ts, id))
	h.put(key, map[string]any{"event_id": id, "ts": ts})
	dayEnd := ts.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	h.add(retention.Audit, dayEnd, key)
}

func (h *history) artifact(finalized time.Time) {
	id := h.id("art-")
	key := must(layout.ArtifactKey("proj", id))
	h.put(key, artifact.Artifact{ArtifactID: id, JobID: id, Type: "BRIEF", CreatedAt: finalized, Finalized: true, FinalizedAt: &finalized, Content: json.RawMessage(`{}`)})
	h.add(retention.Artifacts, finalized, key)
}

// check fails the test for every record within its retention at now with
// a key missing (lost), and every record eligible before now-slack with a
// key still there (not deleted).
func (h *history) check(now time.Time, slack time.Duration) (lost, stale int) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx := context.Background()
	for _, w := range h.recs {
		for _, k := range w.keys {
			_, _, err := h.store.Get(ctx, k)
			present := err == nil
			if err != nil && !errors.Is(err, storage.ErrNotFound) {
				h.t.Fatal(err)
			}
			kept := w.eligible.IsZero() || now.Before(w.eligible)
			switch {
			case kept && !present:
				lost++
				if lost <= 5 {
					h.t.Errorf("%s: %s lost at %s (eligible %s)", w.kind, k, now.Format(time.RFC3339), w.eligible.Format(time.RFC3339))
				}
			case !kept && present && w.eligible.Add(slack+w.late).Before(now):
				stale++
				if stale <= 5 {
					h.t.Errorf("%s: %s still there at %s (eligible %s)", w.kind, k, now.Format(time.RFC3339), w.eligible.Format(time.RFC3339))
				}
			}
		}
	}
	return lost, stale
}

// size counts the store's keys and bytes.
func size(t testing.TB, s *storage.Store) (keys, bytes int) {
	t.Helper()
	ctx := context.Background()
	for k, err := range s.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := s.Get(ctx, k)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		keys++
		bytes += len(b)
	}
	return keys, bytes
}

// killStore fails every call once armed and n more deletes went through,
// and calls kill then: a process that dies mid-pass.
type killStore struct {
	driver.Store
	mu    sync.Mutex
	armed bool
	n     int
	kill  func()
	// unlink, when set, is what the killed delete did before the process
	// died: the file gone, the rest of the Store's delete (its directory
	// pruned) never done.
	unlink  func(key string)
	dead    bool
	deletes int
}

var errKilled = errors.New("killed")

func (s *killStore) arm(n int, kill func()) {
	s.mu.Lock()
	s.armed, s.n, s.kill = true, n, kill
	s.mu.Unlock()
}

func (s *killStore) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return errKilled
	}
	return nil
}

func (s *killStore) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if err := s.check(); err != nil {
		return nil, "", err
	}
	return s.Store.Get(ctx, key)
}

func (s *killStore) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	return s.Store.Put(ctx, key, v, c)
}

func (s *killStore) Delete(ctx context.Context, key string, c storage.Condition) error {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return errKilled
	}
	if s.armed {
		if s.n == 0 {
			s.dead = true
			kill, unlink := s.kill, s.unlink
			s.mu.Unlock()
			if unlink != nil {
				unlink(key)
			}
			kill()
			return errKilled
		}
		s.n--
	}
	s.deletes++
	s.mu.Unlock()
	return s.Store.Delete(ctx, key, c)
}

func (s *killStore) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	if err := s.check(); err != nil {
		return func(yield func(string, error) bool) { yield("", err) }
	}
	return s.Store.ListAfter(ctx, prefix, after)
}
