//go:build unix

package filestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// watchChildEnv runs watchChild on a store directory.
const watchChildEnv = "CONVEYOR_FILESTORE_WATCH_CHILD"

// wakeBound is how soon after another process's Put returned a watcher in
// this one must have been signalled.
const wakeBound = 100 * time.Millisecond

// watchOrSkip watches prefix on s until the test ends, skipping the test
// where the platform cannot watch.
func watchOrSkip(t *testing.T, s *fsStore, prefix string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Watch(ctx, prefix)
	if errors.Is(err, errors.ErrUnsupported) {
		cancel()
		t.Skip(err)
	}
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		for range ch { // until closed
		}
	})
	return ch
}

// TestWatchAcrossProcesses: a Put by another process on the same directory
// wakes a watcher in this one within 100 ms of that Put returning (in
// fact before it returns: the signal follows the rename). Ten writes, each
// one signal.
func TestWatchAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	s := newStore(t)
	// The queue's directory exists, so each write below makes exactly one
	// event a watcher of the prefix signals.
	if _, err := s.Put(t.Context(), "wake/q/seed.json", []byte("{}"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	ch := watchOrSkip(t, s, "wake/q/")

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), watchChildEnv+"="+s.Root())
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			done <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close() // the child exits at EOF
		for range done {
		}
		_ = child.Wait()
	})

	var worst time.Duration
	for i := range 10 {
		sent := time.Now()
		if _, err := fmt.Fprintf(stdin, "wake/q/%02d.json\n", i); err != nil {
			t.Fatal(err)
		}
		signalled, acked := false, false
		var bound <-chan time.Time
		deadline := time.NewTimer(10 * time.Second)
		for !signalled || !acked {
			select {
			case _, ok := <-ch:
				if !ok {
					t.Fatal("the watch channel closed")
				}
				signalled = true
				worst = max(worst, time.Since(sent))
			case line, ok := <-done:
				if !ok || line != "ok" {
					t.Fatalf("child: %q", line)
				}
				acked = true
				if !signalled {
					timer := time.NewTimer(wakeBound)
					defer timer.Stop()
					bound = timer.C
				}
			case <-bound:
				t.Fatalf("write %d: no signal within %v of the other process's Put returning", i, wakeBound)
			case <-deadline.C:
				t.Fatalf("write %d: the child did not write within 10s", i)
			}
		}
		deadline.Stop()
	}
	t.Logf("10 writes by another process: the slowest signal came %v after the write was asked for (Put included)", worst.Round(time.Microsecond))
}

// watchChild is TestWatchAcrossProcesses's child: it writes each key read
// from stdin and says "ok" once the Put returned.
func watchChild(dir string) int {
	s, err := openStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if _, err := s.Put(context.Background(), sc.Text(), []byte(`{"job":1}`), storage.IfNotExists()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ok")
	}
	return 0
}

// TestWatchAnotherStore: a second Store on the same directory in this
// process is another writer like any process.
func TestWatchAnotherStore(t *testing.T) {
	s := newStore(t)
	other, err := openStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	ch := watchOrSkip(t, s, "agents/")
	if _, err := other.Put(t.Context(), "agents/a/runs/r1/status.json", []byte("{}"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(storetestDeadline)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("no signal within %v", storetestDeadline)
	}
}

const storetestDeadline = 5 * time.Second

// TestWatchReleasesEverything: a hundred watches started and cancelled
// leave no inotify instance, descriptor or goroutine behind (goleak checks
// goroutines at the end of the package's tests).
func TestWatchReleasesEverything(t *testing.T) {
	s := newStore(t)
	if _, err := s.Put(t.Context(), "a/b/c", nil, storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	// Stores of earlier tests close their root descriptors when
	// collected: let that happen before counting.
	runtime.GC()
	before, err := openFDs()
	if err != nil {
		t.Skip(err)
	}
	for i := range 100 {
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := s.Watch(ctx, "a/")
		if errors.Is(err, errors.ErrUnsupported) {
			cancel()
			t.Skip(err)
		}
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if i%2 == 0 { // some with a signal pending
			if _, err := s.Put(t.Context(), "a/b/c", []byte{byte(i)}, storage.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		timer := time.NewTimer(storetestDeadline)
		for closed := false; !closed; {
			select {
			case _, ok := <-ch:
				closed = !ok
			case <-timer.C:
				t.Fatalf("watch %d: channel not closed within %v of cancel", i, storetestDeadline)
			}
		}
		timer.Stop()
	}
	runtime.GC()
	after, err := openFDs()
	if err != nil {
		t.Fatal(err)
	}
	if after.total > before.total || after.inotify != 0 {
		t.Fatalf("open descriptors: %+v before 100 watches, %+v after", before, after)
	}
}

type fdCount struct{ total, inotify int }

func openFDs() (fdCount, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fdCount{}, err
	}
	var c fdCount
	for _, e := range entries {
		c.total++
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, "inotify") {
			c.inotify++
		}
	}
	return c, nil
}
