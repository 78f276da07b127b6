//go:build unix

package filestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
)

// killChildEnv runs killChild: "<dir> <stop>".
const killChildEnv = "CONVEYOR_FILESTORE_KILL_CHILD"

const killWriters = 8

func killKey(w int) string { return fmt.Sprintf("kill/w%d/counter", w) }

// TestKillBeforeAcknowledgment re-runs this test binary as a child in
// which 8 writers increment counters of their own with compare-and-swap,
// concurrently, so their syncs are shared, and report every Put that
// returned ("ack"). Writer 0 stops, once its counter reaches a chosen
// value, after its rename and before the sync that would let its Put
// return, and says so; the parent then kills the child with SIGKILL, the
// others wherever they are in their writes. Three rounds, each child
// carrying on from what the last one left. After each kill, every
// counter holds its last acknowledged value with that write's version, or
// the next value (a write not yet acknowledged); writer 0's holds the
// renamed value; and every key stays writable.
func TestKillBeforeAcknowledgment(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	s := newStore(t)
	if !filestore.GroupCommitForTest(s) {
		t.Log("no group commit on this system: every write syncs alone")
	}
	type ack struct {
		n int
		v storage.Version
	}
	acked := map[int]ack{}
	for round := range 3 {
		stop := 20 + 15*round // writer 0 stops at this value
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", killChildEnv, s.Root(), stop))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killed := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() }) // a bound, not a sync
		renamed, acks := -1, 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 4 && f[0] == "ack":
				w, _ := strconv.Atoi(f[1])
				n, _ := strconv.Atoi(f[2])
				if n <= acked[w].n {
					t.Fatalf("round %d: writer %d acknowledged %d after %d", round, w, n, acked[w].n)
				}
				acked[w] = ack{n, storage.Version(f[3])}
				acks++
			case len(f) == 2 && f[0] == "renamed":
				renamed, _ = strconv.Atoi(f[1])
				// Between writer 0's rename and its acknowledgment, and
				// wherever the others are.
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("round %d: child said %q", round, sc.Text())
			}
		}
		werr := cmd.Wait()
		killed.Stop()
		if renamed < 0 {
			t.Fatalf("round %d: the child ended (%v) without reaching the kill point", round, werr)
		}
		t.Logf("round %d: killed after %d acknowledged writes, writer 0 renamed %d", round, acks, renamed)
		for w := range killWriters {
			b, v, err := s.Get(t.Context(), killKey(w))
			if err != nil {
				if a, ok := acked[w]; ok {
					t.Fatalf("round %d: writer %d acknowledged %d, now: %v", round, w, a.n, err)
				}
				continue
			}
			n, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatalf("round %d: writer %d's counter holds %q", round, w, b)
			}
			a := acked[w]
			switch {
			case w == 0 && n != renamed:
				t.Fatalf("round %d: writer 0's counter = %d, want the renamed %d", round, n, renamed)
			case n == a.n && v != a.v:
				t.Fatalf("round %d: writer %d's counter %d has version %q, acknowledged with %q", round, w, n, v, a.v)
			case n != a.n && n != a.n+1:
				t.Fatalf("round %d: writer %d's counter = %d; acknowledged %d, so want %d or %d (in flight)", round, w, n, a.n, a.n, a.n+1)
			}
			if n == a.n+1 {
				acked[w] = ack{n, v} // the next round counts on from here
			}
		}
	}
	// The kills left no lock held and no key but the counters.
	if keys := keysUnder(t, s.Store, ""); len(keys) != killWriters {
		t.Fatalf("keys after the kills: %q", keys)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for w := range killWriters {
		if _, err := s.Put(ctx, killKey(w), []byte("done"), storage.Condition{}); err != nil {
			t.Fatalf("writing %s after the kills: %v", killKey(w), err)
		}
	}
}

// killChild is TestKillBeforeAcknowledgment's child.
func killChild(arg string) int {
	dir, stopArg, _ := strings.Cut(arg, " ")
	stop, _ := strconv.Atoi(stopArg)
	s, err := openStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintf(os.Stdout, format+"\n", args...) // unbuffered: one write(2) per line
	}
	filestore.SetAfterRenameForTest(s, func(key string) {
		if key != killKey(0) {
			return
		}
		b, err := os.ReadFile(s.Root() + "/" + key)
		if n, _ := strconv.Atoi(string(b)); err == nil && n >= stop {
			say("renamed %d", n)
			select {} // until killed
		}
	})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range killWriters {
		wg.Go(func() {
			for {
				n, cond := 0, storage.IfNotExists()
				b, v, err := s.Get(ctx, killKey(w))
				switch {
				case err == nil:
					n, _ = strconv.Atoi(string(b))
					cond = storage.IfMatch(v)
				case !errors.Is(err, storage.ErrNotFound):
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				v, err = s.Put(ctx, killKey(w), []byte(strconv.Itoa(n+1)), cond)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				say("ack %d %d %s", w, n+1, v)
			}
		})
	}
	wg.Wait()
	return 0
}
