package inbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/testkit/machinetest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The inbox entry's table (docs/spec.md#inbox-entry-lifecycle), transcribed by hand.
var specInbox = map[lifecycle.InboxState][]lifecycle.InboxState{
	"pending":   {"processed", "rejected", "expired"},
	"processed": {},
	"rejected":  {},
	"expired":   {},
}

func TestGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, machine.InboxMachine(), specInbox)
}

func TestStructure(t *testing.T) {
	t.Parallel()
	machinetest.Structure(t, machine.InboxMachine().Spec())
}

// TestActors: the gateway (the platform's Worker) processes and rejects, the
// system's cron expires.
func TestActors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		event lifecycle.Event
		actor lifecycle.Actor
		want  lifecycle.InboxState
		err   error
	}{
		{machine.EventInboxProcess, lifecycle.ActorGateway, lifecycle.InboxProcessed, nil},
		{machine.EventInboxReject, lifecycle.ActorGateway, lifecycle.InboxRejected, nil},
		{machine.EventInboxExpire, lifecycle.ActorSystem, lifecycle.InboxExpired, nil},
		{machine.EventInboxExpire, lifecycle.ActorGateway, lifecycle.InboxPending, lifecycle.ErrForbiddenActor},
		{machine.EventInboxProcess, lifecycle.ActorSystem, lifecycle.InboxPending, lifecycle.ErrForbiddenActor},
		{machine.EventInboxProcess, lifecycle.ActorFrontend, lifecycle.InboxPending, lifecycle.ErrForbiddenActor},
	}
	for _, tt := range tests {
		e := &lifecycle.InboxEntry{ID: "inbox_1", Status: lifecycle.InboxPending}
		_, err := machine.InboxMachine().Fire(context.Background(), e, tt.event, tt.actor)
		if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
			t.Errorf("%s by %s: %v, want %v", tt.event, tt.actor, err, tt.err)
		}
		if e.Status != tt.want {
			t.Errorf("%s by %s: status %s, want %s", tt.event, tt.actor, e.Status, tt.want)
		}
	}
}

func TestRandomWalks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	reached := map[lifecycle.InboxState]bool{}
	for range 500 {
		choices := make([]byte, 2*(1+rng.IntN(4)))
		for i := range choices {
			choices[i] = byte(rng.Uint32())
		}
		newEntry := func(s lifecycle.InboxState) *lifecycle.InboxEntry { return &lifecycle.InboxEntry{Status: s} }
		for _, s := range machinetest.Walk(t, machine.InboxMachine(), newEntry, func(e *lifecycle.InboxEntry) lifecycle.InboxState { return e.Status }, nil, choices) {
			reached[s] = true
		}
	}
	for _, s := range machine.InboxStates() {
		if !reached[s] {
			t.Errorf("walks never reached %s", s)
		}
	}
}
