package jobqueue

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// A job without an agent runs in the lane of its type and queue
// (typeLane); the lane is its agent_slug. The default queue's lane of a
// type is the one of the releases before queues, "_type." and the type,
// so the jobs those wrote run on unchanged; a named queue's is "_queue.",
// the queue, "." and the type (a queue name has no "."). Both prefixes
// are reserved: an agent_slug that starts with one is refused.
const (
	typeLanePrefix  = "_type."
	queueLanePrefix = "_queue."
)

// defaultQueue is the queue of a job that names none (NewJob.Queue).
const defaultQueue = "default"

// maxQueueName bounds a queue's name.
const maxQueueName = 64

// typeLane is the lane, and so the agent_slug, of the jobs of type t in
// queue enqueued without an agent.
func typeLane(t lifecycle.JobType, queue string) string {
	if queue == "" || queue == defaultQueue {
		return typeLanePrefix + string(t)
	}
	return queueLanePrefix + queue + "." + string(t)
}

// parseLane returns the job type and queue of a type's lane; typed is
// false for an agent's lane (of the default queue).
func parseLane(lane string) (t lifecycle.JobType, queue string, typed bool) {
	if rest, ok := strings.CutPrefix(lane, typeLanePrefix); ok {
		return lifecycle.JobType(rest), defaultQueue, true
	}
	if rest, ok := strings.CutPrefix(lane, queueLanePrefix); ok {
		if q, tt, ok := strings.Cut(rest, "."); ok && validQueueName(q) == nil && tt != "" {
			return lifecycle.JobType(tt), q, true
		}
	}
	return "", defaultQueue, false
}

// laneQueue is the queue of lane: its type lane's, else the default.
func laneQueue(lane string) string {
	_, q, _ := parseLane(lane)
	return q
}

// validQueueName checks a queue's name: 1 to 64 bytes of [A-Za-z0-9_-].
func validQueueName(name string) error {
	if name == "" || len(name) > maxQueueName {
		return fmt.Errorf("queue name %q: 1 to %d bytes", name, maxQueueName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("queue name %q: byte %q at %d is not one of [A-Za-z0-9_-]", name, c, i)
		}
	}
	return nil
}

// checkQueue fills in and checks n's queue: typeQueue (the type's
// TypeConfig.Queue) when n names none, else the default. A job that names
// an agent runs in its agent's lane, so in the default queue.
func (n *NewJob) checkQueue(typeQueue string) error {
	for _, p := range []string{typeLanePrefix, queueLanePrefix} {
		if strings.HasPrefix(n.AgentSlug, p) {
			return badJob("agent_slug %q: the prefix %q is reserved for the lanes of jobs without an agent", n.AgentSlug, p)
		}
	}
	if n.AgentSlug != "" {
		if n.Queue != "" && n.Queue != defaultQueue {
			return badJob("queue %q: a job that names an agent runs in its agent's lane, in the queue %q", n.Queue, defaultQueue)
		}
		n.Queue = defaultQueue
		return nil
	}
	if n.Queue == "" {
		n.Queue = typeQueue
	}
	if n.Queue == "" {
		n.Queue = defaultQueue
	}
	if err := validQueueName(n.Queue); err != nil {
		return badJob("%v", err)
	}
	return nil
}

// maxLaneSlots is how many locks a type's lane has when no cross-process
// cap is configured (TypeConfig.MaxRunningGlobal 0): more jobs of one
// type than any Worker fleet runs at once. They are made as they are
// first needed, so a lane has as many lock objects as jobs of it ever ran
// at once.
const maxLaneSlots = 1024

// QueueConfig configures a named queue (Config.Queues).
type QueueConfig struct {
	// MaxRunning is the most jobs of the queue (of all its types) one
	// process runs at once. Default 0: no cap but the Worker's Slots.
	MaxRunning int
}

// caps holds the configured concurrency: how many locks a lane has (its
// cap across processes) and how many of its jobs, and of its queue's,
// this process runs at once; and counts the claims this process runs, by
// lane and queue.
type caps struct {
	types   map[lifecycle.JobType]TypeConfig
	queues  map[string]QueueConfig
	rolling bool

	mu      sync.Mutex
	running map[string]int                  // claims running, by "q:" queue and "t:" type
	waiting map[string]map[*agentState]bool // lanes held back by a full cap, by its key
	sched   *scheduler
}

// slotsOf is how many locks lane has: one for an agent's (one running job
// per agent, as the spec says) and for a type this Queue does not
// configure; a configured type's cap across processes, else
// maxLaneSlots. During a rolling upgrade one: a Worker of the previous
// release knows a lane's one lock only (docs/stores.md#upgrades).
func (c *caps) slotsOf(lane string) int {
	t, _, typed := parseLane(lane)
	tc, ok := c.types[t]
	if !typed || !ok || c.rolling {
		return 1
	}
	if tc.MaxRunningGlobal > 0 {
		return min(tc.MaxRunningGlobal, maxLaneSlots)
	}
	return maxLaneSlots
}

// capKeys are the counters a claim of lane counts against, each with its
// limit (0: none): its type's (TypeConfig.MaxRunning) and its queue's
// (QueueConfig.MaxRunning), in this process.
func (c *caps) capKeys(lane string) [2]struct {
	key   string
	limit int
} {
	t, q, typed := parseLane(lane)
	var out [2]struct {
		key   string
		limit int
	}
	out[0].key, out[1].key = "q:"+q, "t:"+string(t)
	out[0].limit = c.queues[q].MaxRunning
	if typed {
		out[1].limit = c.types[t].MaxRunning
	}
	return out
}

// tryStart counts a claim of lane a against its type's and its queue's
// caps in this process and tells whether it may start; if not, nothing is
// counted and a is woken when a claim counted against the full cap ends.
// The check and the count are one step under one lock: two claims apart
// (check, then count) let N concurrent claims each see room for one and
// run N past the cap. ended undoes a count and wakes the lanes its caps
// held back.
func (c *caps) tryStart(a *agentState) bool {
	keys := c.capKeys(a.name)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if k.limit > 0 && c.running[k.key] >= k.limit {
			if c.waiting[k.key] == nil {
				c.waiting[k.key] = map[*agentState]bool{}
			}
			c.waiting[k.key][a] = true
			return false
		}
	}
	for _, k := range keys {
		c.running[k.key]++
	}
	return true
}

func (c *caps) ended(a *agentState, now time.Time) {
	keys := c.capKeys(a.name)
	var held []*agentState
	c.mu.Lock()
	for _, k := range keys {
		c.running[k.key]--
		for w := range c.waiting[k.key] {
			held = append(held, w)
		}
		delete(c.waiting, k.key)
	}
	c.mu.Unlock()
	for _, w := range held {
		c.sched.schedule(w, now)
	}
}

// checkCaps checks the concurrency settings of cfg.
func checkCaps(cfg *Config) error {
	for t, tc := range cfg.Types {
		if tc.MaxRunning < 0 || tc.MaxRunningGlobal < 0 {
			return fmt.Errorf("%w: Types[%s]: negative MaxRunning or MaxRunningGlobal", ErrInvalidConfig, t)
		}
		if tc.Queue != "" {
			if err := validQueueName(tc.Queue); err != nil {
				return fmt.Errorf("%w: Types[%s].Queue: %w", ErrInvalidConfig, t, err)
			}
		}
	}
	for name, qc := range cfg.Queues {
		if err := validQueueName(name); err != nil {
			return fmt.Errorf("%w: Queues: %w", ErrInvalidConfig, err)
		}
		if qc.MaxRunning < 0 {
			return fmt.Errorf("%w: Queues[%s]: negative MaxRunning", ErrInvalidConfig, name)
		}
	}
	return nil
}
