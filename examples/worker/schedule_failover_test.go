//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestScheduleFailsOver: Worker processes fire a schedule of runs and one
// of periodic jobs (each every second) on one store while two CPU hogs and
// a disk writer run. On a
// directory, three Workers: one is killed -9 (and restarted later),
// another stopped (SIGSTOP) past its lease and continued. On a SQLite
// file, two Workers: each in turn is killed -9 and restarted, so one is
// left alone twice. Every slot from the first to the last is fired
// exactly once, each schedule's: none skipped, none twice (a job's id is
// its slot's); no Worker exits on its own.
func TestScheduleFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("35 s of real time per store")
	}
	// Not parallel: its CPU hogs would starve the package's other tests
	// (an event stream client too slow to read is dropped).
	for _, store := range []string{"files", "sqlite"} {
		t.Run(store, func(t *testing.T) { scheduleFailsOver(t, store) })
	}
}

func scheduleFailsOver(t *testing.T, store string) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "conveyor.json")
	if err := os.WriteFile(conf, []byte(`{"schedules": [{"id": "tick", "agent": "demo-research", "every": "1s"},
		{"id": "mail", "every": "1s", "job": {"job_type": "BRIEF", "agent_slug": "mail"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	load(t, dir)
	data := filepath.Join(dir, "data")
	worker := func(name string) *proc {
		return start(t, name, nil, "-role", "runner", "-addr", "", "-owner", name, "-data", data, "-store", store, "-config", conf,
			"-step-pause", "10ms", "-lease", "3s", "-drain", "5s")
	}
	// Each fault lands 15 ms past a slot, while the processes fire it:
	// likely between a slot's claim and its run.
	began := time.Now()
	sleep := func(d time.Duration) {
		time.Sleep(time.Until(time.Now().Add(d).Truncate(time.Second).Add(15 * time.Millisecond)))
	}
	say := func(what string) { t.Logf("%.1fs: %s", time.Since(began).Seconds(), what) }
	var live []*proc
	if store == "files" {
		w := []*proc{worker("w1"), worker("w2"), worker("w3")}
		sleep(8 * time.Second)
		_ = w[0].cmd.Process.Kill() // kill -9, mid-schedule
		say("killed w1")
		sleep(4 * time.Second)
		_ = w[1].cmd.Process.Signal(syscall.SIGSTOP)
		say("stopped w2")
		sleep(5 * time.Second) // past the 3 s lease
		_ = w[1].cmd.Process.Signal(syscall.SIGCONT)
		say("continued w2")
		sleep(4 * time.Second)
		live = []*proc{w[1], w[2], worker("w1-restarted")}
		say("restarted w1")
	} else {
		w := []*proc{worker("w1"), worker("w2")}
		for round, i := range []int{0, 1} {
			sleep(6 * time.Second)
			kill9(w[i])
			say(fmt.Sprintf("killed %s", w[i].name))
			sleep(4 * time.Second) // past the 3 s lease: the other fires alone
			w[i] = worker(fmt.Sprintf("w%d-g%d", i+1, round+2))
			say("restarted it")
		}
		live = w
	}
	sleep(8 * time.Second)
	ended := time.Now()
	for _, p := range live {
		select {
		case err := <-p.done:
			t.Errorf("%s exited on its own: %v", p.name, err)
			p.done <- err
		default:
		}
	}
	for _, p := range live {
		p.stop(t, 15*time.Second)
	}
	checkSlots(t, store, data, began, ended)
}

// checkSlots reads every cron run from the store in data and fails t
// unless every slot of each schedule from its first (at most 5 s after
// began) to 2 s before ended holds exactly one run or job.
func checkSlots(t *testing.T, kind, data string, began, ended time.Time) {
	t.Helper()
	ctx := context.Background()
	store, _, err := storeopen.Embedded(ctx, kind, data)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	bySlot := map[string][]string{}
	for key, err := range store.List(ctx, layout.JobsPrefix+"scheduler:mail:") {
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSuffix(strings.TrimPrefix(key, layout.JobsPrefix), ".json")
		bySlot[id] = append(bySlot[id], id)
	}
	for key, err := range store.List(ctx, layout.AgentsPrefix) {
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ok := layout.ParseRunStatusKey(key); !ok {
			continue
		}
		b, _, err := store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var st lifecycle.RunStatus
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		if st.Trigger == "cron" {
			bySlot[st.IdempotencyKey] = append(bySlot[st.IdempotencyKey], st.RunID)
		}
	}
	// Each schedule owes the slots from the first after its state was
	// made, which the processes' start-up puts a slot apart at times (seen
	// under load: tick's first slot fired 0.3 s after the start, mail's
	// state made just past it): the first slot of each is its own.
	var missing, twice []string
	n, first := 0, ended
	for _, id := range []string{"tick", "mail"} {
		from := began.Truncate(time.Second).Add(time.Second)
		for from.Before(ended) && bySlot[schedule.Key(id, from)] == nil {
			from = from.Add(time.Second)
		}
		if from.Sub(began) > 5*time.Second {
			t.Fatalf("%s's first slot fired %s after the start", id, from.Sub(began))
		}
		if from.Before(first) {
			first = from
		}
		// The slots up to 2 s before the stop had time to fire.
		for s := from; s.Before(ended.Add(-2 * time.Second)); s = s.Add(time.Second) {
			n++
			switch runs := bySlot[schedule.Key(id, s)]; {
			case len(runs) == 0:
				missing = append(missing, id+" "+s.Format("15:04:05"))
			case len(runs) > 1:
				twice = append(twice, id+" "+s.Format("15:04:05")+": "+strings.Join(runs, ", "))
			}
		}
	}
	t.Logf("%d slots of both schedules from %s (%.1f s after the start): %d missing, %d fired twice (%d runs and jobs in all)",
		n, first.Format("15:04:05"), first.Sub(began).Seconds(), len(missing), len(twice), len(bySlot))
	if len(missing) > 0 || len(twice) > 0 {
		t.Errorf("missing %v; twice %v", missing, twice)
	}
}

// load starts two CPU hogs (busy loops) and a disk writer (dd, with
// fsync) for the test's life.
func load(t *testing.T, dir string) {
	t.Helper()
	for _, script := range []string{
		"while :; do :; done",
		"while :; do :; done",
		"while :; do dd if=/dev/zero of=" + filepath.Join(dir, "dd.out") + " bs=1M count=32 conv=fsync 2>/dev/null; done",
	} {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so the dd it runs goes too
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
}
