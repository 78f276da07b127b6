package machine

import (
	"sync"

	"github.com/runconveyor/conveyor/lifecycle"
)

// InboxStates lists the inbox entry states in the spec's order.
func InboxStates() []lifecycle.InboxState {
	return []lifecycle.InboxState{lifecycle.InboxPending, lifecycle.InboxProcessed, lifecycle.InboxRejected, lifecycle.InboxExpired}
}

// Inbox-entry events.
const (
	EventInboxProcess lifecycle.Event = "process" // pending → processed: the validation gate passed
	EventInboxReject  lifecycle.Event = "reject"  // pending → rejected: the validation gate refused
	EventInboxExpire  lifecycle.Event = "expire"  // pending → expired: the TTL ran out
)

// InboxMachine is the inbox entry machine (docs/spec.md#inbox-entry-lifecycle): the
// gateway (the platform's Worker) processes or rejects a pending entry; the system's cron
// expires it.
func InboxMachine() *Machine[lifecycle.InboxState, *lifecycle.InboxEntry] { return inboxMachine() }

var inboxMachine = sync.OnceValue(func() *Machine[lifecycle.InboxState, *lifecycle.InboxEntry] {
	gateway := []lifecycle.Actor{lifecycle.ActorGateway}
	return MustNew(Definition[lifecycle.InboxState, *lifecycle.InboxEntry]{
		Name:     "inbox-entry",
		Initial:  lifecycle.InboxPending,
		States:   InboxStates(),
		Terminal: []lifecycle.InboxState{lifecycle.InboxProcessed, lifecycle.InboxRejected, lifecycle.InboxExpired},
		Transitions: []Transition[lifecycle.InboxState, *lifecycle.InboxEntry]{
			{From: lifecycle.InboxPending, To: lifecycle.InboxProcessed, Event: EventInboxProcess, Actors: gateway},
			{From: lifecycle.InboxPending, To: lifecycle.InboxRejected, Event: EventInboxReject, Actors: gateway},
			{From: lifecycle.InboxPending, To: lifecycle.InboxExpired, Event: EventInboxExpire, Actors: []lifecycle.Actor{lifecycle.ActorSystem}},
		},
		GetState: func(e *lifecycle.InboxEntry) lifecycle.InboxState { return e.Status },
		SetState: func(e *lifecycle.InboxEntry, s lifecycle.InboxState) { e.Status = s },
	})
})
