package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// laneBatch is how many lane keys one List reads (one S3 page): claiming
// costs one List per laneBatch jobs of an agent, so finding work is O(1)
// store calls amortized, never a scan of the jobs.
const laneBatch = 1000

// lanes is the agents' ready lanes (queue/lanes/{agent}/...): their
// listing, of one agent's lane or of every lane at once, into the agents'
// caches, and the writes and deletes of their entries.
type lanes struct {
	store    *storage.Store
	clock    clock.Clock
	log      *slog.Logger
	sched    *scheduler
	leaseTTL time.Duration
	grace    stopGrace
	listGen  atomic.Uint64 // lane listings begun (deleteLane)
	// origin marks this Queue's own lane writes, which it applies to its
	// cache as it makes them, and its Workers' watch of the lanes, which
	// they then do not wake (mine).
	origin origin.Origin

	mu       sync.Mutex
	globalAt time.Time     // when refreshLanes last listed every lane
	listCost time.Duration // how long that listing took (relistCost)
	newWork  int64         // listings that found new work (foundWork)
	// dirty: the store's watch signalled a lane change since.
	dirty bool
	// poll: a Worker over a store without a watch polls the lanes
	// soon after it last found work (busyPoll).
	poll bool
}

// laneRecheck is how long an agent's lane, listed empty, is taken to stay
// empty; it doubles with every empty listing in a row, up to
// laneRecheck<<maxIdleShift (3.2 s). Jobs other processes enqueue for an
// idle agent are found within that delay; this Queue's own enqueues and
// retries are found at once.
const (
	laneRecheck  = 200 * time.Millisecond
	maxIdleShift = 4
)

// recheckAt is when a's lane, as last listed, is worth listing again.
// a.mu must be held.
func (a *agentState) recheckAt() time.Time {
	return a.listedAt.Add(laneRecheck << min(a.idle, maxIdleShift))
}

// head returns the lane key of a a claim takes next (nextKey: the first
// ready one in priority order, else the one ready first). It lists the
// lane (laneBatch keys) when the cache is empty, or when the cache holds
// no ready key, unless the last listing is less than laneRecheck old;
// force lists an empty cache regardless. It does not remove the key.
func (q *lanes) head(ctx context.Context, a *agentState, force bool) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := q.clock.Now()
	fresh := !a.listedAt.IsZero() && now.Before(a.recheckAt()) && !now.Before(a.listedAt)
	if len(a.keys) > 0 {
		if key, _, ready := nextKey(a.keys, now); ready || fresh {
			return key, nil
		}
	} else if fresh && a.complete && !force {
		return "", nil // listed whole and used up less than laneRecheck ago
	}
	prefix, err := layout.LanePrefix(a.name)
	if err != nil {
		return "", err
	}
	gen := q.listGen.Add(1)
	var keys []string
	for key, err := range q.store.List(ctx, prefix) {
		if err != nil {
			return "", err
		}
		keys = append(keys, key)
		if len(keys) == laneBatch {
			break
		}
	}
	complete := len(keys) < laneBatch
	keys = a.withoutGone(keys, gen)
	a.keys, a.complete, a.listedAt = keys, complete, now
	if len(keys) == 0 {
		a.idle++ // an idle agent is listed less and less often
		return "", nil
	}
	a.idle = 0
	key, _, _ := nextKey(keys, now)
	return key, nil
}

// depths reads every agent's ready lane and counts, by agent in name
// order, the work waiting there now (Queue.Depths).
func (q *lanes) depths(ctx context.Context) ([]AgentDepth, error) {
	now := q.clock.Now()
	var out []AgentDepth
	index := map[string]int{}
	for key, err := range q.store.List(ctx, lanePrefix) {
		if err != nil {
			return nil, err
		}
		agent, at, _, ok := layout.ParseLaneKey(key)
		if !ok {
			continue
		}
		i, seen := index[agent]
		if !seen {
			i = len(out)
			index[agent] = i
			out = append(out, AgentDepth{Agent: agent})
		}
		d := &out[i]
		if at.After(now) {
			d.Waiting++
			continue
		}
		d.Ready++
		d.Age = max(d.Age, now.Sub(at))
	}
	slices.SortFunc(out, func(a, b AgentDepth) int { return strings.Compare(a.Agent, b.Agent) })
	return out, nil
}

// watchRelist is how soon after the last whole-queue listing a signal of
// the store's watch (Worker) lists the lanes again: a signal comes for
// every lane write of other processes and other Queues (this Queue's own,
// made under mine, do not signal where the store can tell), so under load
// the listings are bounded to one per watchRelist.
const watchRelist = 10 * time.Millisecond

// relistCost bounds the share of its time a Queue spends listing every
// lane at a watch's (or a busy poll's) prompting: the next such listing
// waits at least relistCost times as long as the last one took, so a
// store whose whole-queue listing is slow (filestore walks a directory per
// agent) spends at most about 1/relistCost of a core on it, however many
// signals its writes cause. The plain laneRecheck pace is never slowed.
const relistCost = 5

// lanesChanged notes the store's signal that the ready lanes changed: the
// next Claim lists them (within watchRelist of the last listing), and
// waiting Worker loops wake to make it.
func (q *lanes) lanesChanged() {
	q.mu.Lock()
	q.dirty = true
	q.mu.Unlock()
	q.sched.changed()
}

// mine marks ctx as this Queue's for a lane write whose effect the Queue
// applies to its cache itself (laneAdded after a Put, deleting around a
// Delete), and for its Workers' watch of the lanes: where the store can
// tell, such a write does not wake that watch, so the Queue does not list
// every lane for a change it already knows (a whole-queue listing at each
// of its own enqueues and pickups was 56 µs of a job's 440 on SQLite at
// W=16). A store that cannot tell signals anyway. Another Queue on the
// same Store has another mark, so its writes still wake this one's watch.
// Every write made under mine ends with wroteMine.
func (q *lanes) mine(ctx context.Context) context.Context {
	return origin.With(ctx, &q.origin)
}

// wroteMine ends a write made under mine, given its error: one that may
// have landed unseen (a store error other than a refused condition) is
// taken as the signal the watch left out, and the lanes are listed.
func (q *lanes) wroteMine(err error) {
	if _, fromStore := errors.AsType[*storage.OpError](err); fromStore && !errors.Is(err, storage.ErrPreconditionFailed) {
		q.lanesChanged()
	}
}

// signalled tells whether a signal of the store's watch is not yet acted
// on (Worker.waitWork lists soon).
func (q *lanes) signalled() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dirty
}

// pollLanes lists every lane now, unless a listing ran less than busyPoll
// ago (Worker.pollLanes).
func (q *lanes) pollLanes(ctx context.Context) error {
	q.mu.Lock()
	q.poll = true
	q.mu.Unlock()
	return q.refreshLanes(ctx)
}

// foundWork counts the listings of every lane that found new work (an
// agent's first ready key not known before).
func (q *lanes) foundWork() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.newWork
}

// globalBatch bounds the keys one refreshLanes reads (ten S3 List pages).
const globalBatch = 10000

// refreshLanes lists every agent's lane at once (queue/lanes/, up to
// globalBatch keys), at most once per laneRecheck, fills the empty caches
// of the agents it covered and schedules those with work: one List finds
// new work of every idle agent, instead of one List per idle agent.
// Agents past a truncated listing keep their own, backing-off rechecks in
// head.
func (q *lanes) refreshLanes(ctx context.Context) error {
	now := q.clock.Now()
	gen, due := q.relistDue(now)
	if !due {
		return nil
	}
	// The cost is the listing's real duration, whatever the Queue's clock.
	began := time.Now()
	defer func() {
		q.mu.Lock()
		q.listCost = time.Since(began)
		q.mu.Unlock()
	}()
	l, err := q.listAllLanes(ctx)
	if err != nil {
		return err
	}
	found := false
	defer func() {
		if found {
			q.mu.Lock()
			q.newWork++
			q.mu.Unlock()
		}
	}()
	for name := range l.byAgent {
		if storekey.ValidateID("agent slug", name) == nil {
			q.sched.agent(name)
		}
	}
	for _, a := range q.sched.all() {
		if first := a.fillLanes(l, gen, now); first != "" {
			found = true
			at, _, ok := parseLaneKey(first)
			if !ok {
				at = now // malformed: claimAgent cleans it up
			}
			q.sched.schedule(a, at)
		}
	}
	return nil
}

// relistDue reports whether refreshLanes is due to list at now and, if so,
// marks it listing and returns the listing's generation.
func (q *lanes) relistDue(now time.Time) (gen uint64, due bool) {
	q.mu.Lock()
	every := laneRecheck
	switch {
	case q.dirty:
		every = watchRelist
	case q.poll:
		every = busyPoll
	}
	every = min(laneRecheck, max(every, relistCost*q.listCost))
	if !q.globalAt.IsZero() && now.Sub(q.globalAt) < every && !now.Before(q.globalAt) {
		q.mu.Unlock()
		return 0, false
	}
	q.globalAt, q.dirty, q.poll = now, false, false
	gen = q.listGen.Add(1)
	q.mu.Unlock()
	return gen, true
}

// laneListing is one listing of every agent's lane (listAllLanes).
type laneListing struct {
	byAgent   map[string][]string // up to laneBatch keys per agent
	truncated bool                // globalBatch keys reached
	last      string              // the last key listed
	lastAgent string              // its agent
}

// listAllLanes lists queue/lanes/, up to globalBatch keys. The keys are
// gathered in one slice, each agent's lane a clipped window of it (List
// yields an agent's keys together, in byte order), rather than one
// growing slice per agent: a listing of a backlog was a large share of a
// job's allocations (issue 22).
func (q *lanes) listAllLanes(ctx context.Context) (*laneListing, error) {
	byAgent := make(map[string][]string, q.sched.known())
	var all []string
	truncated, last := false, ""
	n := 0
	cur, start, room := "", 0, 0 // the agent whose keys all[start:] are, and how many more it may have
	closeRun := func() {
		if len(all) == start {
			return
		}
		// Full slice expression: an append to one agent's keys must not
		// write into the next agent's.
		run := all[start:len(all):len(all)]
		if prior := byAgent[cur]; prior != nil {
			run = append(prior, run...) // not grouped (a store out of order): correct, if slower
		}
		byAgent[cur] = run
	}
	for key, err := range q.store.List(ctx, lanePrefix) {
		if err != nil {
			return nil, err
		}
		if n++; n > globalBatch {
			truncated = true
			break
		}
		last = key
		agent, ok := layout.LaneAgent(key)
		if !ok {
			continue
		}
		if agent != cur {
			closeRun()
			cur, start, room = agent, len(all), laneBatch-len(byAgent[agent])
		}
		if room > 0 {
			all = append(all, key)
			room--
		}
	}
	closeRun()
	lastAgent, _ := layout.LaneAgent(last)
	return &laneListing{byAgent: byAgent, truncated: truncated, last: last, lastAgent: lastAgent}, nil
}

// fillLanes fills a's lane cache from l, listed at now as generation gen,
// when it is empty, or merges in work l shows ahead of it, and returns
// the first key to schedule a at ("" for none).
func (a *agentState) fillLanes(l *laneListing, gen uint64, now time.Time) string {
	covered := !l.truncated || lanePrefix+a.name+"/" <= l.last
	keys := l.byAgent[a.name]
	a.mu.Lock()
	keys = a.withoutGone(keys, gen)
	a.covered = covered
	var first string
	switch {
	case covered && len(a.keys) == 0:
		a.keys, a.listedAt = keys, now
		a.complete = len(keys) < laneBatch && !(l.truncated && a.name == l.lastAgent)
		if len(keys) == 0 {
			a.idle++
		} else {
			a.idle = 0
			first, _ = readyFirst(keys)
		}
	case len(keys) > 0 && len(a.keys) > 0 && workAhead(keys, a.keys):
		// Another process put work ahead of what the cache holds (say,
		// a job enqueued now before a retry due later, or one of a
		// higher priority): merge it in.
		a.keys = slices.Compact(slices.Sorted(slices.Values(append(slices.Clip(a.keys), keys...))))
		a.complete = a.complete && !(l.truncated && a.name == l.lastAgent)
		first, _ = readyFirst(a.keys)
	}
	a.mu.Unlock()
	return first
}

// maxGone is how many lane keys an agent remembers deleting (deleteLane):
// more than one agent's claims delete while one listing runs.
const maxGone = 8

// goneKey is a lane key this Queue deleted, and the generation of the
// lane listings (lanes.listGen) when the delete had landed.
type goneKey struct {
	key string
	gen uint64
}

// deleteLane deletes lane entry key of a, which a claim is done with. A
// listing (of a's lane, or of every lane) that began before the delete
// landed may still hold the key; it must not put it back in a's cache, where the next claim
// would rewrite the lock to name a job long gone and delete the entry
// again: two writes for nothing. So the key is remembered (maxGone) and
// such a listing leaves it out (refreshLanes).
func (q *lanes) deleteLane(ctx context.Context, a *agentState, key string) {
	landed := q.deleting(a, key)
	err := q.store.Delete(q.mine(ctx), key, storage.Condition{})
	landed()
	q.wroteMine(err)
}

// deleting is deleteLane's note in a's cache for a delete of key about to
// be written (alone, or in a commit): key is dropped from the cache and
// left out of every listing until landed is called, once the write is
// done, whatever its outcome.
func (q *lanes) deleting(a *agentState, key string) (landed func()) {
	a.mu.Lock()
	a.dropLocked(key)
	if len(a.gone) == maxGone {
		a.gone = slices.Delete(a.gone, 0, 1)
	}
	// Left out of every listing until the delete has landed.
	a.gone = append(a.gone, goneKey{key, math.MaxUint64})
	a.mu.Unlock()
	return func() { q.deleted(a, key) }
}

// deleted ends deleting: listings begun from now on show key if it is
// still there.
func (q *lanes) deleted(a *agentState, key string) {
	gen := q.listGen.Load()
	a.mu.Lock()
	for i := range a.gone {
		if a.gone[i].key == key {
			a.gone[i].gen = gen
		}
	}
	a.mu.Unlock()
}

// dropLocked removes key from a's cache; a.mu must be held.
func (a *agentState) dropLocked(key string) {
	for i, k := range a.keys {
		if k == key {
			a.keys = append(a.keys[:i], a.keys[i+1:]...)
			return
		}
	}
}

// withoutGone returns keys, listed by the listing of generation gen, less
// those a's claims deleted after that listing may have begun. a.mu must be
// held.
func (a *agentState) withoutGone(keys []string, gen uint64) []string {
	if len(a.gone) == 0 || len(keys) == 0 {
		return keys
	}
	return slices.DeleteFunc(keys, func(k string) bool {
		return slices.ContainsFunc(a.gone, func(g goneKey) bool { return g.key == k && g.gen >= gen })
	})
}

// forget empties a's cache, so the next head lists the lane again.
func (a *agentState) forget() {
	a.mu.Lock()
	a.keys, a.listedAt = nil, time.Time{}
	a.mu.Unlock()
}

// idleUntil is when an agent with no ready job is next worth a look: its
// lane's head becomes ready, its lock is due an orphan check (lockAt), or,
// for a lane no whole-queue listing covers, the lane is due a listing.
func (a *agentState) idleUntil(lockAt time.Time) time.Time {
	next := lockAt
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) > 0 {
		if _, at := readyFirst(a.keys); at.Before(next) {
			next = at
		}
	} else if !a.covered || !a.complete {
		next = minTime(next, a.recheckAt())
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// The queue's keys are built in storage's layout (issue 10 G): jobs under
// layout.JobsPrefix, lanes, agent locks and the sweep lease under
// layout.QueuePrefix, so listing jobs/ yields only jobs.
const (
	lanePrefix  = layout.LanesPrefix
	agentPrefix = layout.AgentLocksPrefix
)

// laneKeyOf is j's lane key, of its agent and priority, ready at at (a
// time the lane key holds: enqueue checked the job's).
func laneKeyOf(j *lifecycle.Job, at time.Time) string {
	k, _ := layout.PriorityLaneKey(j.AgentSlug, priorityOf(j.Priority), at, j.JobID)
	return k
}

// priorityOf is a job's priority as stored (0: the default) as a number;
// one outside the range (a record no Enqueue wrote) as the nearest.
func priorityOf(p int) int {
	if p == 0 {
		return lifecycle.DefaultPriority
	}
	return max(lifecycle.MinPriority, min(p, lifecycle.MaxPriority))
}

// Within one priority a lane's keys are in ready-time order, so the first
// key of a priority is its first ready one: a pass over a lane parses that
// key of each priority (at most nine) and skips the rest of the priority by
// a binary search (nextGroup).

// readyTime is the ready time of lane key k; a malformed key is ready at
// the zero time (a claim deletes it).
func readyTime(k string) time.Time {
	_, _, at, _, ok := layout.ParsePriorityLaneKey(k)
	if !ok {
		return time.Time{}
	}
	return at
}

// nextGroup is the index in keys (one lane's, in key order) of the first
// key of a priority other than that of keys[i]; a malformed key is a
// priority of its own.
func nextGroup(keys []string, i int) int {
	g := laneGroup(keys[i])
	rest := keys[i+1:]
	return i + 1 + sort.Search(len(rest), func(j int) bool { return laneGroup(rest[j]) != g })
}

// laneGroup is what the lane keys of one priority share (layout's
// PriorityLaneKey): their entry's mark and rank, or "" for the default's.
func laneGroup(key string) string {
	entry := key[strings.LastIndexByte(key, '/')+1:]
	if len(entry) >= 2 && (entry[0] == '!' || entry[0] == '_') {
		return entry[:2]
	}
	return ""
}

// nextKey is the entry of keys (one lane's, in key order) a claim takes
// next at now: the first ready one in key order, so of the highest
// priority with a ready entry, the earliest of it (ready true); when none
// is ready, the one ready first (readyFirst).
func nextKey(keys []string, now time.Time) (key string, at time.Time, ready bool) {
	for i := 0; i < len(keys); i = nextGroup(keys, i) {
		t := readyTime(keys[i])
		if !t.After(now) {
			return keys[i], t, true
		}
		if key == "" || t.Before(at) {
			key, at = keys[i], t
		}
	}
	return key, at, false
}

// readyFirst is the entry of keys (one lane's, in key order) that is
// ready first, and its time: the earliest of each priority's first.
func readyFirst(keys []string) (key string, at time.Time) {
	for i := 0; i < len(keys); i = nextGroup(keys, i) {
		if t := readyTime(keys[i]); key == "" || t.Before(at) {
			key, at = keys[i], t
		}
	}
	return key, at
}

// workAhead tells whether listed, a listing of a lane, holds work a claim
// would take before any of cached, the lane as cached: a key that sorts
// first (a higher priority, or earlier), or one ready sooner.
func workAhead(listed, cached []string) bool {
	if listed[0] < cached[0] {
		return true
	}
	_, l := readyFirst(listed)
	_, c := readyFirst(cached)
	return l.Before(c)
}

// parseLaneKey returns the ready time and job id of a lane key.
func parseLaneKey(key string) (time.Time, string, bool) {
	_, at, id, ok := layout.ParseLaneKey(key)
	return at, id, ok
}

// laneEntry is the value of a lane key.
type laneEntry struct {
	JobID   string    `json:"job_id"`
	ReadyAt time.Time `json:"ready_at"`
}

func (q *lanes) putLane(ctx context.Context, key, jobID string, at time.Time) error {
	b, _ := json.Marshal(laneEntry{JobID: jobID, ReadyAt: at.UTC()})
	_, err := q.store.Put(q.mine(ctx), key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		err = nil
	}
	if agent, ok := layout.LaneAgent(key); ok && err == nil {
		q.laneAdded(agent, key)
	}
	q.wroteMine(err)
	return err
}

// laneAdded puts a key this Queue wrote into agent's cache, in order,
// when the cache would otherwise miss it (the cache held the whole lane,
// or the key sorts before its last entry), and schedules a look at the
// agent when the key becomes ready.
func (q *lanes) laneAdded(agent, key string) {
	a := q.sched.agent(agent)
	a.mu.Lock()
	if !a.listedAt.IsZero() {
		i, found := slices.BinarySearch(a.keys, key)
		if !found && (a.complete || i < len(a.keys)) {
			a.keys = slices.Insert(a.keys, i, key)
			a.idle = 0
		}
	}
	a.mu.Unlock()
	if at, _, ok := parseLaneKey(key); ok {
		q.sched.schedule(a, at)
	}
}

func encodeLane(jobID string, at time.Time) ([]byte, error) {
	e := laneEntry{JobID: jobID, ReadyAt: at.UTC()}
	return e.AppendJSON(make([]byte, 0, 128))
}

// putLaneFirst writes a lane entry ahead of the job record it indexes.
// undo deletes the entry if this call created it, for a job write that
// then fails; an entry that already existed is left.
func (q *lanes) putLaneFirst(ctx context.Context, key, jobID string, at time.Time) (undo func(), err error) {
	b, err := encodeLane(jobID, at)
	if err != nil {
		return nil, err
	}
	_, err = q.store.Put(ctx, key, b, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	return func() {
		// An undo of an Enqueue whose caller may have gone: bounded by
		// StopGrace, not by ctx, nor by nothing (an unreachable store).
		dctx, cancel := q.grace.after(ctx)
		defer cancel()
		_ = q.store.Delete(dctx, key, storage.Condition{})
	}, nil
}

// undoUnlessLanded runs undo, the removal of a lane entry written ahead of
// its job's write, only when err says that write did not land: its
// condition failed, or it was refused before reaching the store. After an
// outcome the store could not learn (ErrOutcomeUnknown, a context ended
// mid-call) the job may exist, and the entry is what makes it run; an
// entry without a job is garbage a claim clears (lanePending).
func undoUnlessLanded(undo func(), err error) {
	if _, fromStore := errors.AsType[*storage.OpError](err); !fromStore || errors.Is(err, storage.ErrPreconditionFailed) {
		undo()
	}
}

// relaneIfSlow writes lane entry key again (create-only) after its job's
// write, begun at began, when the two writes were so far apart (half a
// LeaseTTL, a margin for skewed clocks) that a claim or the sweep may have
// taken the entry, written first, for the garbage of a dead writer
// (lanePending) and deleted it: the job would then point at an entry that
// no longer exists, in no lane and named by no lock. A failure is logged:
// the job is written.
func (q *lanes) relaneIfSlow(ctx context.Context, key, jobID string, began time.Time) {
	if q.clock.Now().Sub(began) < q.leaseTTL/2 {
		return
	}
	at, _, ok := parseLaneKey(key)
	if !ok {
		return
	}
	pctx, cancel := q.grace.after(ctx)
	defer cancel()
	if err := q.putLane(pctx, key, jobID, at); err != nil {
		q.log.ErrorContext(ctx, "jobqueue: lane entry of a slow write not confirmed", "job_id", jobID, "lane", key, "err", err)
	}
}
