package inbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/machinetest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Seed 002 §1.2, transcribed by hand.
var seedInbox = map[inbox.State][]inbox.State{
	"pending":   {"processed", "rejected", "expired"},
	"processed": {},
	"rejected":  {},
	"expired":   {},
}

func TestGrid(t *testing.T) {
	t.Parallel()
	machinetest.Grid(t, inbox.Machine(), seedInbox)
}

func TestStructure(t *testing.T) {
	t.Parallel()
	machinetest.Structure(t, inbox.Machine().Spec())
}

// TestActors: seed 002 §1.2 says the Worker processes and rejects, the
// system's cron expires.
func TestActors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		event lifecycle.Event
		actor lifecycle.Actor
		want  inbox.State
		err   error
	}{
		{inbox.EventProcess, lifecycle.ActorGateway, inbox.Processed, nil},
		{inbox.EventReject, lifecycle.ActorGateway, inbox.Rejected, nil},
		{inbox.EventExpire, lifecycle.ActorSystem, inbox.Expired, nil},
		{inbox.EventExpire, lifecycle.ActorGateway, inbox.Pending, lifecycle.ErrForbiddenActor},
		{inbox.EventProcess, lifecycle.ActorSystem, inbox.Pending, lifecycle.ErrForbiddenActor},
		{inbox.EventProcess, lifecycle.ActorFrontend, inbox.Pending, lifecycle.ErrForbiddenActor},
	}
	for _, tt := range tests {
		e := &inbox.Entry{ID: "inbox_1", Status: inbox.Pending}
		_, err := inbox.Machine().Fire(context.Background(), e, tt.event, tt.actor)
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
	reached := map[inbox.State]bool{}
	for range 500 {
		choices := make([]byte, 2*(1+rng.IntN(4)))
		for i := range choices {
			choices[i] = byte(rng.Uint32())
		}
		newEntry := func(s inbox.State) *inbox.Entry { return &inbox.Entry{Status: s} }
		for _, s := range machinetest.Walk(t, inbox.Machine(), newEntry, func(e *inbox.Entry) inbox.State { return e.Status }, nil, choices) {
			reached[s] = true
		}
	}
	for _, s := range inbox.States() {
		if !reached[s] {
			t.Errorf("walks never reached %s", s)
		}
	}
}
