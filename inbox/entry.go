package inbox

import (
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// State is a state of an inbox entry (seed 002 §1.1).
type State string

// States of the inbox entry machine.
const (
	Pending   State = "pending"
	Processed State = "processed"
	Rejected  State = "rejected"
	Expired   State = "expired"
)

// States lists the inbox entry states in the seed's order.
func States() []State { return []State{Pending, Processed, Rejected, Expired} }

// Source says where an entry came from (seed 002 §1.3).
type Source struct {
	// Type is one of "ui", "telegram", "webhook", "agent", "cron".
	Type string `json:"type"`
	// Identity is e.g. "owner", "guest:zone_abc", "agent:archivist-violin".
	Identity string `json:"identity"`
}

// Intent is what the entry asks for (seed 002 §1.3).
type Intent struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// Metadata of an entry (seed 002 §1.3).
type Metadata struct {
	CorrelationID string `json:"correlation_id,omitempty"`
	// Priority is "normal" or "high".
	Priority string `json:"priority"`
	// TTLHours is the entry's lifetime while pending; 72 by default.
	TTLHours int `json:"ttl_hours"`
}

// Entry is an inbox entry, inbox/{id}.json (seed 002 §1.3).
type Entry struct {
	ID              string    `json:"id"`
	Source          Source    `json:"source"`
	Intent          Intent    `json:"intent"`
	Metadata        Metadata  `json:"metadata"`
	Status          State     `json:"status"`
	CreatedAt       time.Time `json:"created_at"`
	ProposalID      string    `json:"proposal_id,omitempty"`
	RejectionReason string    `json:"rejection_reason,omitempty"`
}

// Inbox-entry events.
const (
	EventProcess lifecycle.Event = "process" // pending → processed: the validation gate passed
	EventReject  lifecycle.Event = "reject"  // pending → rejected: the validation gate refused
	EventExpire  lifecycle.Event = "expire"  // pending → expired: the TTL ran out
)

// Machine is the inbox entry machine of seed 002 §1.2: the gateway (the
// seed's Worker) processes or rejects a pending entry; the system's cron
// expires it.
func Machine() *lifecycle.Machine[State, *Entry] { return machine() }

var machine = sync.OnceValue(func() *lifecycle.Machine[State, *Entry] {
	gateway := []lifecycle.Actor{lifecycle.ActorGateway}
	return lifecycle.MustNew(lifecycle.Definition[State, *Entry]{
		Name:     "inbox-entry",
		Initial:  Pending,
		States:   States(),
		Terminal: []State{Processed, Rejected, Expired},
		Transitions: []lifecycle.Transition[State, *Entry]{
			{From: Pending, To: Processed, Event: EventProcess, Actors: gateway},
			{From: Pending, To: Rejected, Event: EventReject, Actors: gateway},
			{From: Pending, To: Expired, Event: EventExpire, Actors: []lifecycle.Actor{lifecycle.ActorSystem}},
		},
		GetState: func(e *Entry) State { return e.Status },
		SetState: func(e *Entry, s State) { e.Status = s },
	})
})
