package memstore

import (
	"context"
	"strings"
)

type watch struct {
	prefix string
	ch     chan struct{}
}

// Watch implements driver.Watcher. Every Put or Delete that changes a key
// under prefix signals the channel before it returns (a Put whose
// condition fails changes nothing and signals nothing). The send never
// blocks: the channel holds one signal, and a full one already says that
// something changed. No goroutine is started: when ctx is done the channel
// is closed by a context.AfterFunc.
func (s *memDriver) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	w := &watch{prefix: prefix, ch: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.watches == nil {
		s.watches = map[*watch]struct{}{}
	}
	s.watches[w] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.watches, w)
		close(w.ch) // under mu: notify never sends on a closed channel
		s.mu.Unlock()
	})
	return w.ch, nil
}

// notify signals the watchers of key; s.mu is held for writing.
func (s *memDriver) notify(key string) {
	for w := range s.watches {
		if strings.HasPrefix(key, w.prefix) {
			select {
			case w.ch <- struct{}{}:
			default: // a signal is already pending
			}
		}
	}
}
