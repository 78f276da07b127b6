package jobqueue

import "sync"

// waitSet tells Wait calls of this Queue that their job was written: one
// channel per job with waiters, closed at the job's next write.
type waitSet struct {
	mu   sync.Mutex
	jobs map[string]*waitEntry
}

type waitEntry struct {
	ch chan struct{}
	n  int // waiters holding ch
}

// add returns the channel closed at jobID's next write, and done, to call
// when the caller no longer waits on it.
func (w *waitSet) add(jobID string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.jobs == nil {
		w.jobs = map[string]*waitEntry{}
	}
	e := w.jobs[jobID]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		w.jobs[jobID] = e
	}
	e.n++
	return e.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.n--; e.n == 0 && w.jobs[jobID] == e {
			delete(w.jobs, jobID)
		}
	}
}

// changed wakes the waiters of jobID. The writer calls it while it still
// counts as work on the clock, so a fake clock never sees the waiters idle
// between the write and their wake-up.
func (w *waitSet) changed(jobID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.jobs[jobID]; e != nil {
		close(e.ch)
		delete(w.jobs, jobID)
	}
}
