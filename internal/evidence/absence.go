package evidence

import (
	"sync"
	"time"
)

// Absence is the evidence a destructive decision needs on a store that
// settles (storage.SettleTime > 0): a key read as missing is believed only
// when it was read missing at least Settle apart, with no read in between
// that found it. The sweep that deletes a lane entry whose job reads as
// missing, the rescue that gives a run up, anything that cannot be undone,
// asks Confirmed at each pass instead of acting on one not-found read. On a
// store that settles at once (Settle 0) every absence is confirmed
// immediately, so the check costs nothing there.
//
// The zero value settles at once. Safe for concurrent use; it holds one
// entry per key currently suspected, dropped when found, confirmed, or not
// asked about for 4×Settle (so a month of passes costs what a day costs).
type Absence struct {
	Settle time.Duration

	mu    sync.Mutex
	first map[string]absent
}

type absent struct{ first, last time.Time }

// Confirmed records that key was just read as missing at now and reports
// whether that is confirmed: an earlier not-found of key, at least Settle
// before now, with no Found since. The evidence serves every caller alike
// (a poll and a submit may both ask about one key) until it is 2×Settle
// old; then a new suspicion starts, so an absence seen long ago is not
// believed of a key that may have been written since.
func (a *Absence) Confirmed(key string, now time.Time) bool {
	if a.Settle <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first == nil {
		a.first = make(map[string]absent)
	}
	a.pruneLocked(now)
	e, ok := a.first[key]
	if !ok || now.Sub(e.first) >= 2*a.Settle {
		a.first[key] = absent{first: now, last: now}
		return false
	}
	e.last = now
	a.first[key] = e
	return now.Sub(e.first) >= a.Settle
}

// Found forgets a suspicion: key was read present, so its absence must be
// seen anew, Settle apart, before it is believed.
func (a *Absence) Found(key string) {
	a.mu.Lock()
	delete(a.first, key)
	a.mu.Unlock()
}

// Suspected counts the keys read missing whose evidence is held.
func (a *Absence) Suspected() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.first)
}

// pruneLocked drops suspicions nobody re-checked for 4×Settle: the key left
// the caller's view (its entry went away), so no decision waits on it.
func (a *Absence) pruneLocked(now time.Time) {
	if len(a.first) < 64 {
		return
	}
	for k, e := range a.first {
		if now.Sub(e.last) > 4*a.Settle {
			delete(a.first, k)
		}
	}
}
