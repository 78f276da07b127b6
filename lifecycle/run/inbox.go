package run

import (
	"encoding/json"
	"sync"
)

// candidate is a run the loop should look at, with the writer that knows its
// latest document (so a run handed over by Submit needs no read).
type candidate struct {
	slug string
	w    *statusWriter
	// input is the run's input when known (handed over by Submit), so
	// executing it needs no read either.
	input      json.RawMessage
	inputKnown bool
}

// inbox holds the runs handed to the loop (by Submit, control calls and
// freed slots); wake tells the loop there are some.
type inbox struct {
	mu     sync.Mutex
	handed []candidate
	wake   chan struct{}
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

// hand gives the loop a run to consider, without blocking.
func (in *inbox) hand(c candidate) {
	in.mu.Lock()
	in.handed = append(in.handed, c)
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// woken is ready when runs were handed since the loop last took them.
func (in *inbox) woken() <-chan struct{} { return in.wake }

// hasHanded tells whether runs wait in the queue of handed runs.
func (in *inbox) hasHanded() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.handed) > 0
}

// take empties the queue of handed runs.
func (in *inbox) take() []candidate {
	in.mu.Lock()
	defer in.mu.Unlock()
	h := in.handed
	in.handed = nil
	return h
}
