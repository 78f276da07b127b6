package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/jobaudit"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		// A worker process of a chaos run: this test binary re-executed.
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// smallRun is the configuration of the test suite's chaos runs: about 20 s
// of wall time each, on two CPU cores shared with other work. The drain
// ends as soon as every job settles; its bound is generous because on a
// loaded machine (every package's tests at once) the killed workers'
// leases and the retries' backoffs take longer to play out, and a run cut
// short reports jobs still in flight as violations.
func smallRun(store string) Options {
	o := DefaultOptions()
	o.Store, o.Workers, o.Jobs, o.Agents, o.Seed = store, 3, 60, 6, 7
	o.Duration, o.Drain, o.Interval, o.OutageFor = 12*time.Second, 30*time.Second, time.Second, 2*time.Second
	return o
}

// judge reports a chaos run: it passes only with no violation at all.
func judge(t *testing.T, rep *Report) {
	t.Helper()
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
	if len(rep.Violations) > 0 {
		t.Fatalf("%d violations:\n%s", len(rep.Violations), strings.Join(summarize(rep.Violations, 10), "\n"))
	}
}

// runSmall runs smallRun(store) with the faults of mod, keeping the
// workers' logs in the test's directory.
func runSmall(t *testing.T, store string, mod func(*Options)) {
	o := smallRun(store)
	o.LogDir = t.TempDir()
	if mod != nil {
		mod(&o)
	}
	var log bytes.Buffer
	o.Log = &log
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if rep.Kills+rep.Pauses+rep.Corruptions+rep.Outages == 0 {
		t.Fatalf("no fault was injected:\n%s", log.String())
	}
	judge(t, rep)
}

// TestChaosFilestore: three worker processes on one filestore directory,
// killed, paused, their records corrupted and their store failing.
func TestChaosFilestore(t *testing.T) {
	t.Parallel()
	runSmall(t, "file", nil)
}

// TestChaosSQLite: the same on one SQLite file (the Worker's default
// store), shared by the worker processes.
func TestChaosSQLite(t *testing.T) {
	t.Parallel()
	runSmall(t, "sqlite", nil)
}

// TestChaosMinIO: the same on one MinIO bucket, the server stopped and
// restarted on the same port and data.
func TestChaosMinIO(t *testing.T) {
	t.Parallel()
	miniotest.Require(t)
	runSmall(t, "minio", nil)
}

// TestCheckerCatches feeds the checker states with one violation each and
// a clean one: the checks can fail.
func TestCheckerCatches(t *testing.T) {
	base := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	plan := []Planned{{"job-a", "run_a", "agent-1"}, {"job-b", "run_b", "agent-1"}}
	job := func(p Planned, s lifecycle.JobState, attempt int) Record {
		j := &lifecycle.Job{JobID: p.JobID, RunID: p.RunID, AgentSlug: p.AgentSlug, JobType: lifecycle.JobBrief,
			Status: s, Attempt: attempt, MaxAttempts: 3}
		if s == lifecycle.JobComplete {
			j.ArtifactID = artifact.IDForJob(p.JobID)
		}
		return Record{Present: true, Job: j}
	}
	art := func(p Planned, attempt int, at time.Time) artifact.Artifact {
		c, _ := json.Marshal(map[string]any{"title": "t", "body": producer{"w0-g0", 3, attempt, 42}.String()})
		return artifact.Artifact{ArtifactID: artifact.IDForJob(p.JobID), JobID: p.JobID, RunID: p.RunID,
			AgentSlug: p.AgentSlug, Type: artifact.Brief, Finalized: true, CreatedAt: at, Content: c}
	}
	ev := func(id string, min int, from, to lifecycle.JobState) lifecycle.AuditEvent {
		ts := base.Add(time.Duration(min) * time.Minute)
		return lifecycle.AuditEvent{ID: ts.Format("20060102T150405.000000000Z") + "-" + id, TS: ts, Event: "job.status.update",
			JobID: id, From: string(from), To: string(to), Actor: "orchestration-layer"}
	}
	trail := func(id string, final lifecycle.JobState) []lifecycle.AuditEvent {
		evs := []lifecycle.AuditEvent{ev(id, 0, "", lifecycle.JobPending), ev(id, 0, lifecycle.JobPending, lifecycle.JobQueued),
			ev(id, 1, lifecycle.JobQueued, lifecycle.JobContextAssembly)}
		if final == lifecycle.JobComplete {
			evs = append(evs, ev(id, 2, lifecycle.JobContextAssembly, lifecycle.JobNotebookLMCall),
				ev(id, 2, lifecycle.JobNotebookLMCall, lifecycle.JobArtifactWrite), ev(id, 3, lifecycle.JobArtifactWrite, lifecycle.JobComplete))
		}
		return evs
	}
	clean := func() *State {
		return &State{
			Plan:      plan,
			Records:   map[string]Record{"job-a": job(plan[0], lifecycle.JobComplete, 1), "job-b": job(plan[1], lifecycle.JobComplete, 1)},
			Artifacts: []artifact.Artifact{art(plan[0], 1, base.Add(150*time.Second)), art(plan[1], 1, base.Add(150*time.Second))},
			Events:    map[string][]lifecycle.AuditEvent{"job-a": trail("job-a", lifecycle.JobComplete), "job-b": trail("job-b", lifecycle.JobComplete)},
			Replayed:  map[string]lifecycle.JobState{"job-a": lifecycle.JobComplete, "job-b": lifecycle.JobComplete},
			Corrupted: map[string]bool{}, Garbage: map[string][]byte{}, Current: map[string][]byte{},
			RunWrites: map[string]int64{"run-1": 5}, RunEvents: map[string]int{"run-1": 5},
		}
	}
	if vs := Check(clean()); len(vs) != 0 {
		t.Fatalf("a clean state has violations: %v", vs)
	}
	cases := []struct {
		name   string
		break_ func(st *State)
		check  string
		want   string
	}{
		{"artifact for a job still in its pipeline", func(st *State) {
			st.Records["job-b"] = job(plan[1], lifecycle.JobArtifactWrite, 2)
			st.Replayed["job-b"] = lifecycle.JobArtifactWrite
		}, CheckArtifact, "ARTIFACT_WRITE job (attempt 2/3"},
		{"DEAD job pointing at an artifact", func(st *State) {
			j := job(plan[1], lifecycle.JobDead, 3)
			j.Job.ArtifactID = "art-x"
			st.Records["job-b"] = j
			st.Replayed["job-b"] = lifecycle.JobDead
		}, CheckArtifact, "DEAD job pointing at artifact"},
		{"COMPLETE without artifact", func(st *State) {
			st.Artifacts = st.Artifacts[:1]
		}, CheckArtifact, "COMPLETE with 0 artifacts"},
		{"two artifacts", func(st *State) {
			a := st.Artifacts[0]
			a.ArtifactID = "art-other"
			st.Artifacts = append(st.Artifacts, a)
		}, CheckArtifact, "COMPLETE with 2 artifacts"},
		{"artifact disagreeing with its job", func(st *State) {
			st.Artifacts[1].RunID = "run_a"
		}, CheckArtifact, "artifact says job job-b run run_a"},
		{"job stuck in a pipeline state", func(st *State) {
			r := job(plan[1], lifecycle.JobNotebookLMCall, 2)
			r.Job.Lease = &lifecycle.Lease{Owner: "w1-g0", Epoch: 4, ExpiresAt: base}
			st.Records["job-b"] = r
			st.Artifacts = st.Artifacts[:1]
			st.Replayed["job-b"] = lifecycle.JobNotebookLMCall
		}, CheckTerminal, "stuck in NOTEBOOKLM_CALL (attempt 2/3"},
		{"poison record left in place", func(st *State) {
			st.Records["job-b"] = Record{Present: true, Raw: []byte("junk"), Invalid: "undecodable"}
			st.Corrupted["jobs/job-b.json"] = true
		}, CheckTerminal, "and was not quarantined"},
		{"record gone without quarantine", func(st *State) {
			st.Records["job-b"] = Record{}
		}, CheckTerminal, "record is gone and not in quarantine"},
		{"quarantine of a record nobody corrupted", func(st *State) {
			st.Records["job-b"] = Record{}
			st.Quarantine = []records.Quarantined{{Key: "jobs/job-b.json", Reason: "cannot decode"}}
		}, CheckQuarantine, "though chaos never corrupted it"},
		{"corrupt lock left in place", func(st *State) {
			k := "queue/agents/agent-1.json"
			st.Corrupted[k], st.Garbage[k], st.Current[k] = true, []byte("junk"), []byte("junk")
		}, CheckQuarantine, "still holds the garbage"},
		{"late artifact write", func(st *State) {
			// Attempt 1 was rescued at minute 2; the artifact it produced
			// was created at minute 4; attempt 2 completed with it.
			st.Events["job-b"] = append(trail("job-b", "")[:3],
				ev("job-b", 2, lifecycle.JobContextAssembly, lifecycle.JobRetryBackoff),
				ev("job-b", 3, lifecycle.JobRetryBackoff, lifecycle.JobQueued),
				ev("job-b", 3, lifecycle.JobQueued, lifecycle.JobContextAssembly),
				ev("job-b", 5, lifecycle.JobContextAssembly, lifecycle.JobNotebookLMCall),
				ev("job-b", 5, lifecycle.JobNotebookLMCall, lifecycle.JobArtifactWrite),
				ev("job-b", 5, lifecycle.JobArtifactWrite, lifecycle.JobComplete))
			st.Records["job-b"].Job.Attempt = 2
			st.Artifacts[1].CreatedAt = base.Add(4 * time.Minute)
		}, CheckLateWrite, "after its attempt 1 had ended"},
		{"audit disagreeing with the record", func(st *State) {
			st.Replayed["job-b"] = lifecycle.JobNotebookLMCall
		}, CheckAudit, `audit replays to "NOTEBOOKLM_CALL", the record says COMPLETE`},
		{"run status write without its audit event", func(st *State) {
			st.RunEvents["run-1"] = 4
		}, CheckAudit, "5 status writes, 4 audit events: 1 missing"},
		{"audit that does not replay", func(st *State) {
			st.ReplayErr = &jobaudit.ReplayError{JobID: "job-b", EventID: "e1", Problem: `"COMPLETE" → "QUEUED" is not a move`}
		}, CheckAudit, "does not replay"},
	}
	t.Run("late artifact of a job that ends DEAD", func(t *testing.T) {
		// Allowed (docs/design.md#fencing-and-leases, "What stays, by physics"): attempt 1
		// froze after its lease check, was rescued at minute 2 and created
		// its artifact at minute 4; the later attempts failed and the job
		// is DEAD, pointing at nothing.
		st := clean()
		st.Events["job-b"] = append(trail("job-b", "")[:3],
			ev("job-b", 2, lifecycle.JobContextAssembly, lifecycle.JobRetryBackoff),
			ev("job-b", 3, lifecycle.JobRetryBackoff, lifecycle.JobQueued),
			ev("job-b", 3, lifecycle.JobQueued, lifecycle.JobContextAssembly),
			ev("job-b", 5, lifecycle.JobContextAssembly, lifecycle.JobFailed),
			ev("job-b", 5, lifecycle.JobFailed, lifecycle.JobDead))
		st.Records["job-b"] = job(plan[1], lifecycle.JobDead, 3)
		st.Replayed["job-b"] = lifecycle.JobDead
		st.Artifacts[1].CreatedAt = base.Add(4 * time.Minute)
		if vs := Check(st); len(vs) != 0 {
			t.Fatalf("violations: %v", vs)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := clean()
			c.break_(st)
			vs := Check(st)
			for _, v := range vs {
				if v.Check == c.check && strings.Contains(v.Detail, c.want) {
					return
				}
			}
			t.Fatalf("want a [%s] violation containing %q, got %v", c.check, c.want, vs)
		})
	}
}

// TestObserveCleanRun: a run without faults, in process on a memstore,
// read back by observe, passes every check; the same store with an
// artifact for a job that is not COMPLETE fails one.
func TestObserveCleanRun(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	w := WorkerOptions{ID: "w0-g0", Step: time.Second, Work: 5 * time.Millisecond}
	q, err := jobqueue.New(queueConfig(s, "test", time.Second, time.Second, slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	plan := plannedJobs(Options{Jobs: 6, Agents: 2})
	for _, p := range plan {
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: p.JobID, RunID: p.RunID, JobType: lifecycle.JobBrief, AgentSlug: p.AgentSlug}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	wk := &jobqueue.Worker{Queue: q, ID: w.ID, Handlers: newHandlers(w, slog.New(slog.DiscardHandler)), Slots: 2, PollInterval: 10 * time.Millisecond, SweepInterval: -1}
	go func() { _ = wk.Run(wctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := observe(ctx, s, plan, false)
		if err == nil && st.settled() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("jobs did not settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	st, err := observe(ctx, s, plan, true)
	if err != nil {
		t.Fatal(err)
	}
	if vs := Check(st); len(vs) != 0 {
		t.Fatalf("a clean run has violations: %v", vs)
	}
	if len(st.Artifacts) != len(plan) {
		t.Fatalf("%d artifacts, want %d", len(st.Artifacts), len(plan))
	}
	// An extra job that never ran, given an artifact behind the queue's
	// back: the checker must see it.
	extra := Planned{JobID: "job-extra", RunID: "run_2026-02-24_extra", AgentSlug: "agent-09"}
	if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: extra.JobID, RunID: extra.RunID, JobType: lifecycle.JobBrief, AgentSlug: extra.AgentSlug}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Artifacts().Create(ctx, lifecycle.ActorNLMBackend, lifecycle.DefaultProject, artifact.Draft{
		JobID: extra.JobID, RunID: extra.RunID, Type: artifact.Brief, AgentSlug: extra.AgentSlug,
		Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}); err != nil {
		t.Fatal(err)
	}
	st, err = observe(ctx, s, append(plan, extra), true)
	if err != nil {
		t.Fatal(err)
	}
	vs := Check(st)
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, "[artifact] job-extra: QUEUED job") || !strings.Contains(joined, "[terminal] job-extra: stuck in QUEUED") {
		t.Fatalf("the checker missed the extra job's artifact or state:\n%s", joined)
	}
}

// TestGarbageIsNotAJob: what corruption writes is never a valid job.
func TestGarbageIsNotAJob(t *testing.T) {
	for i := range 40 {
		g := garbage(rand.New(rand.NewPCG(uint64(i), 1)), "job-x")
		if j, _ := decodeJob("job-x", g); j != nil {
			t.Fatalf("garbage %q decodes as a job", g)
		}
	}
}
