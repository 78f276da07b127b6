package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// The data of each event type, field order as in the contract. "from" is
// always present on status events (empty for a creation).
type (
	runStatusData struct {
		Type      string `json:"type"`
		RunID     string `json:"runId"`
		AgentSlug string `json:"agentSlug"`
		Status    string `json:"status"`
		From      string `json:"from"`
	}
	runStepData struct {
		Type      string `json:"type"`
		RunID     string `json:"runId"`
		AgentSlug string `json:"agentSlug"`
		Step      int    `json:"step"`
	}
	inboxNewData struct {
		Type    string `json:"type"`
		EntryID string `json:"entryId"`
		Count   int    `json:"count"`
	}
	inboxStatusData struct {
		Type    string `json:"type"`
		EntryID string `json:"entryId"`
		Status  string `json:"status"`
		From    string `json:"from"`
	}
	jobStatusData struct {
		Type   string `json:"type"`
		JobID  string `json:"jobId"`
		Status string `json:"status"`
		From   string `json:"from"`
	}
	proposalData struct {
		Type       string `json:"type"`
		ProposalID string `json:"proposalId"`
		RunID      string `json:"runId"`
		Status     string `json:"status"`
		From       string `json:"from"`
	}
)

// batch is what one audit event became: its frames on the wire, ready to
// write to every client, and the run it belongs to (for ?run=).
type batch struct {
	id    string
	run   string
	frame []byte
	// tenant is the tenant of the record the object is about (its audit
	// event's): only that tenant's clients get it.
	tenant string
}

// seenBy tells whether a client acting for tenant (lifecycle.WithTenant of
// its request) gets b (docs/design.md#tenants).
func (b *batch) seenBy(tenant string) bool {
	return tenant == lifecycle.AllTenants || tenant == b.tenant
}

// runStatus is the part of a run's status.json the feed reads.
type runStatus struct {
	Status         string     `json:"status"`
	StepsCompleted int        `json:"steps_completed"`
	FinishedAt     *time.Time `json:"finished_at"`
}

// cacheCap bounds the translator's per-run maps. Past it a map is simply
// emptied: the cost is a re-read of the run index, or a step count
// announced twice, never a wrong value.
const cacheCap = 4096

// agentCache maps run id to agent slug for every translator of a feed (the
// live one and each replay's): a run's index entry never changes, so one
// copy serves all, and 300 clients replaying the same history hold it
// once, not 300 times. Past cacheCap entries it is emptied.
type agentCache struct {
	mu sync.Mutex
	m  map[string]string
}

func newAgentCache() *agentCache { return &agentCache{m: map[string]string{}} }

func (c *agentCache) get(runID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[runID]
	return a, ok
}

func (c *agentCache) put(runID, agent string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= cacheCap {
		clear(c.m)
	}
	c.m[runID] = agent
}

// translator turns audit events into the contract's events. It reads the
// store for what an audit event does not carry: a run's agent (the run
// index) and its step count (status.json), and the inbox's pending count.
// One translator serves one reader of the log (the live feed, or one
// client's replay) and is not safe for concurrent use.
type translator struct {
	store *storage.Store
	box   *inbox.Box
	// agents maps run id to agent slug, shared by the feed's translators.
	agents *agentCache
	// steps is the step count last announced per run, so a count is
	// announced once, on the first audit event that finds it higher.
	steps map[string]int
	// Per pass (see begin): each run's status.json and the pending count
	// are read at most once, so a pass costs one read per run touched.
	status map[string]runStatus
	// pending is the pending count read in this pass, by tenant: an
	// inbox.new goes to its entry's tenant alone, with that tenant's count.
	// counted: pending holds this pass's read (a tenant missing has none).
	pending map[string]int
	counted bool
}

func newTranslator(s *storage.Store, box *inbox.Box, agents *agentCache) *translator {
	return &translator{store: s, box: box, agents: agents, steps: map[string]int{}}
}

// begin starts a pass over newly listed audit events.
func (t *translator) begin() {
	if t.status == nil {
		t.status = map[string]runStatus{}
	}
	clear(t.status)
	if t.pending == nil {
		t.pending = map[string]int{}
	}
	clear(t.pending)
	t.counted = false
	if len(t.steps) > cacheCap {
		clear(t.steps)
	}
}

// stepsRun are the run states, of every run machine, in which steps
// execute: only a status write from one of them counts a step (the step
// update, a move to a wait, the end), so only those make the feed read
// status.json.
func stepsRun(state string) bool { return state == "running" || state == "cancel_requested" }

// errSkip marks an audit event the feed cannot use; it is skipped, with a
// warning, and never retried.
var errSkip = errors.New("events: audit event skipped")

// translateAll returns the frames of the events of one audit object (one
// event, or a batch of the job queue's, records.Expand), none
// for an event type the contract does not publish, as one batch under the
// object's id (a client resumes by object), and the run it belongs to. A
// store failure is returned as is: the caller retries the object at its
// next poll.
func (t *translator) translateAll(ctx context.Context, id string, evs []lifecycle.AuditEvent) (batch, error) {
	b := batch{id: id}
	var frames []Event
	for i := range evs {
		ev := &evs[i]
		ev.ID = id
		b.tenant = ev.TenantID // one record's object: one tenant
		if err := t.frames(ctx, ev, &b, &frames); err != nil {
			return b, err
		}
	}
	// Only the last event of an audit object carries its id: a client cut
	// off between two of them resumes from the id before, and so gets the
	// first again rather than never the second.
	for i, f := range frames {
		if i < len(frames)-1 {
			f.ID = ""
		}
		b.frame = appendFrame(b.frame, f)
	}
	return b, nil
}

// frames appends the frames of ev to frames and sets b's run.
func (t *translator) frames(ctx context.Context, ev *lifecycle.AuditEvent, b *batch, frames *[]Event) error {
	add := func(typ string, v any) {
		d, _ := json.Marshal(v) // structs of strings and ints: it cannot fail
		*frames = append(*frames, Event{ID: ev.ID, Type: typ, Data: d})
	}
	switch ev.Event {
	case "run.status.update":
		if ev.RunID == "" {
			return fmt.Errorf("%w: run.status.update without run_id", errSkip)
		}
		b.run = ev.RunID
		agent, err := t.agent(ctx, ev.RunID)
		if err != nil {
			return err
		}
		// The audit event does not carry the step count; status.json does.
		// Only a write made while steps execute can count one.
		if stepsRun(ev.From) && agent != "" {
			st, err := t.runStatus(ctx, agent, ev.RunID)
			if err != nil {
				return err
			}
			if st.StepsCompleted > t.steps[ev.RunID] {
				t.steps[ev.RunID] = st.StepsCompleted
				add(TypeRunStepCompleted, runStepData{Type: TypeRunStepCompleted, RunID: ev.RunID, AgentSlug: agent, Step: st.StepsCompleted})
			}
			if st.FinishedAt != nil && st.Status == ev.To && ev.From != ev.To {
				delete(t.steps, ev.RunID) // the run's last write: nothing more to count
			}
		}
		if ev.From != ev.To {
			add(TypeRunStatusChanged, runStatusData{Type: TypeRunStatusChanged, RunID: ev.RunID, AgentSlug: agent, Status: ev.To, From: ev.From})
		}
	case "inbox.create":
		n, err := t.pendingCount(ctx, ev.TenantID)
		if err != nil {
			return err
		}
		add(TypeInboxNew, inboxNewData{Type: TypeInboxNew, EntryID: ev.EntryID, Count: n})
	case "inbox.status.update":
		add(TypeInboxStatusChanged, inboxStatusData{Type: TypeInboxStatusChanged, EntryID: ev.EntryID, Status: ev.To, From: ev.From})
	case "job.create", "job.status.update":
		b.run = ev.RunID
		add(TypeJobStatusChanged, jobStatusData{Type: TypeJobStatusChanged, JobID: ev.JobID, Status: ev.To, From: ev.From})
	case "proposal.create", "proposal.status.update":
		b.run = ev.RunID
		typ := TypeProposalStatusChanged
		if ev.Event == "proposal.create" {
			typ = TypeProposalCreated
		}
		add(typ, proposalData{Type: typ, ProposalID: ev.ProposalID, RunID: ev.RunID, Status: ev.To, From: ev.From})
	case "nlm.status.update":
		add(TypeNLMStatusChanged, jobStatusData{Type: TypeNLMStatusChanged, JobID: ev.JobID, Status: ev.To, From: ev.From})
	}
	return nil
}

// agent finds a run's agent through the run index. A run without an index
// entry (written by hand, or removed) gets an empty agentSlug rather than
// holding up the feed.
func (t *translator) agent(ctx context.Context, runID string) (string, error) {
	if a, ok := t.agents.get(runID); ok {
		return a, nil
	}
	key, err := layout.RunIndexKey(runID)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errSkip, err)
	}
	raw, _, err := t.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var idx struct {
		AgentSlug string `json:"agent_slug"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil || storekey.ValidateID("slug", idx.AgentSlug) != nil {
		return "", nil // a poison index entry: the run's owner quarantines it
	}
	t.agents.put(runID, idx.AgentSlug)
	return idx.AgentSlug, nil
}

func (t *translator) runStatus(ctx context.Context, agent, runID string) (runStatus, error) {
	if st, ok := t.status[runID]; ok {
		return st, nil
	}
	key, err := layout.RunStatusKey(agent, runID)
	if err != nil {
		return runStatus{}, nil
	}
	var st runStatus
	raw, _, err := t.store.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return runStatus{}, err
	default:
		_ = json.Unmarshal(raw, &st) // a poison status counts no steps; its runner quarantines it
	}
	t.status[runID] = st
	return st, nil
}

// pendingCount counts tenant's pending inbox entries, reading the inbox
// once per pass, every tenant's entries at once. The inbox keeps no count,
// so this reads every live entry: O(live entries) per pass that holds an
// inbox.create, however many tenants its entries are of.
func (t *translator) pendingCount(ctx context.Context, tenant string) (int, error) {
	if t.counted {
		return t.pending[tenant], nil
	}
	if t.pending == nil {
		t.pending = map[string]int{}
	}
	for e, err := range t.box.List(lifecycle.WithTenant(ctx, lifecycle.AllTenants), inbox.ListOptions{Status: lifecycle.InboxPending}) {
		if err != nil {
			clear(t.pending)
			return 0, err
		}
		t.pending[e.TenantID]++
	}
	t.counted = true
	return t.pending[tenant], nil
}
