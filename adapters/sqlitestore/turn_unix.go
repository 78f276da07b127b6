//go:build unix

package sqlitestore

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// turn makes the processes that write one file take turns. SQLite's own
// busy handler is unfair: it retries after sleeps of 1 ms growing to
// 100 ms, and a process committing back to back takes the write lock
// again long before (measured: 0 and 4,120 jobs in one round).
//
// A transaction holds an exclusive flock(2) on <path>-lock, taken before
// its BEGIN, released after its COMMIT. A process that finds it held says
// it waits with a shared flock on <path>-turn, and keeps trying -lock; it
// drops -turn once it has -lock, or gives up. A process about to take
// -lock first tries -turn exclusively: while someone waits, it does not
// take -lock. So two busy processes alternate, each committing all the
// writes that queued meanwhile. Every flock is non-blocking (try is one
// attempt), so a wait ends with its caller's context. Between attempts a
// process waits on a FIFO, rung by the process that changed what it waits
// for, so the lock passes at once (a Go sleep shorter than 1 ms lasts
// about 1 ms on Linux: measured): a waiter in line on <path>-bell-lock,
// rung when -lock is released to waiters; a process letting waiters go
// first on <path>-bell-turn, rung when a waiter drops -turn. Two bells,
// so a process never takes the ring it gave another. A missed ring costs
// one poll. Uncontended, it costs four flock calls a commit.
type turn struct {
	lock, turn *os.File
	bells      [2]bell // for -lock, for -turn
	announced  bool    // this process holds -turn shared: it waits in line
}

// bell is a FIFO, read with a deadline and written without blocking.
type bell struct {
	r    *os.File
	ring int // the FIFO again, a raw non-blocking fd
}

func openTurn(path string) (_ *turn, err error) {
	t := &turn{bells: [2]bell{{ring: -1}, {ring: -1}}}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.lock, err = os.OpenFile(path+"-lock", os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, err
	}
	if t.turn, err = os.OpenFile(path+"-turn", os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, err
	}
	for i, name := range []string{path + "-bell-lock", path + "-bell-turn"} {
		if err = unix.Mkfifo(name, 0o644); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, err
		}
		// One left by a copy that does not keep FIFOs is a plain file: a
		// bell that never rings and grows by a byte a ring. Refused.
		var st unix.Stat_t
		if err = unix.Stat(name, &st); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return nil, fmt.Errorf("sqlitestore: %s is not a FIFO (remove it: it is made again)", name)
		}
		// O_RDWR: opening a FIFO so never blocks, and reads never see EOF.
		if t.bells[i].r, err = os.OpenFile(name, os.O_RDWR|unix.O_NONBLOCK, 0); err != nil {
			return nil, err
		}
		if t.bells[i].ring, err = unix.Open(name, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// wait returns when the process this one waits for rings, or after d.
func (t *turn) wait(d time.Duration) {
	b := &t.bells[1]
	if t.announced {
		b = &t.bells[0]
	}
	if err := b.r.SetReadDeadline(time.Now().Add(d)); err != nil {
		time.Sleep(d)
		return
	}
	var buf [64]byte
	_, _ = b.r.Read(buf[:])
}

// wake rings bell i (a full FIFO already rings).
func (t *turn) wake(i int) { _, _ = unix.Write(t.bells[i].ring, []byte{1}) }

// waiters tells whether a process waits in line for -lock.
func (t *turn) waiters() bool {
	err := flock(t.turn, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		_ = flock(t.turn, unix.LOCK_UN)
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// try makes one attempt at the cross-process write lock, after any
// process waiting for it, and reports whether it holds it now.
func (t *turn) try() (bool, error) {
	if !t.announced {
		err := flock(t.turn, unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // someone waits: after them
		}
		if err != nil {
			return false, err
		}
		_ = flock(t.turn, unix.LOCK_UN)
	}
	err := flock(t.lock, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		t.abandon()
		return true, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return false, err
	}
	if !t.announced {
		// Held: wait in line. Failing to take -turn now (a process
		// checking it that instant) only means it will not yield this
		// round; the next try announces again.
		t.announced = flock(t.turn, unix.LOCK_SH|unix.LOCK_NB) == nil
	}
	return false, nil
}

// abandon stops waiting in line, waking a process that let this one go
// first.
func (t *turn) abandon() {
	if t.announced {
		_ = flock(t.turn, unix.LOCK_UN)
		t.announced = false
		t.wake(1)
	}
}

// release lets the next process write, waking it if one waits.
func (t *turn) release() {
	_ = flock(t.lock, unix.LOCK_UN)
	if t.waiters() {
		t.wake(0)
	}
}

func (t *turn) close() {
	for _, f := range []*os.File{t.lock, t.turn, t.bells[0].r, t.bells[1].r} {
		if f != nil {
			_ = f.Close()
		}
	}
	for _, b := range t.bells {
		if b.ring >= 0 {
			_ = unix.Close(b.ring)
		}
	}
}
