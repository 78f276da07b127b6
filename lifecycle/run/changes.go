package run

import (
	"sync"
)

// changes tells every Wait that some run's status changed: a status write
// closes the channel the waiters hold and makes a new one.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

func newChanges() *changes { return &changes{ch: make(chan struct{})} }

// broadcast wakes every Wait: some run's status changed.
func (c *changes) broadcast() {
	c.mu.Lock()
	close(c.ch)
	c.ch = make(chan struct{})
	c.mu.Unlock()
}

// next is closed at the next broadcast.
func (c *changes) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}
