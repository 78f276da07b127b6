package memstore

import (
	"context"
	"strings"

	"github.com/runconveyor/conveyor/internal/origin"
)

type watch struct {
	prefix string
	ch     chan struct{}
	except *origin.Origin // its context's origin: writes of it do not signal it
}

// Watch implements driver.Watcher. Every Put or Delete that changes a key
// under prefix signals the channel before it returns (a Put whose
// condition fails changes nothing and signals nothing). The send never
// blocks: the channel holds one signal, and a full one already says that
// something changed. A write made under the origin ctx is marked with
// (internal/origin) does not signal it: its writer knows. No goroutine is started: when ctx is done the channel
// is closed by a context.AfterFunc.
func (s *memDriver) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	w := &watch{prefix: prefix, ch: make(chan struct{}, 1), except: origin.Of(ctx)}
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

// notify signals the watchers of key, written under origin mark (nil for
// none); s.mu is held for writing.
func (s *memDriver) notify(key string, mark *origin.Origin) {
	for w := range s.watches {
		if strings.HasPrefix(key, w.prefix) && (mark == nil || mark != w.except) {
			select {
			case w.ch <- struct{}{}:
			default: // a signal is already pending
			}
		}
	}
}
