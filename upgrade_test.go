package conveyor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// The store testdata/stores/558b656 holds: what commit 558b656 (issue 28's
// base) wrote through its public API (README.md there says how). Its ids
// are the generator's, drawn once.
const (
	oldStore       = "testdata/stores/558b656/store"
	oldCompleted   = "run_2026-11-20_090000_150ff02cc1"
	oldKeyed       = "run_2026-11-20_090000_0926f8fb51"
	oldKey         = "api:fixture:request-1"
	oldScheduled   = "run_2026-11-20_091000_197a820559"
	oldFailed      = "run_2026-11-20_090000_6ab75a4cd3"
	oldApproval    = "run_2026-11-20_090007_ab350a690d"
	oldNLMRun      = "run_2026-11-20_090008_df700099ba"
	oldRequested   = "run_2026-11-20_091003_a7ca69f6a6"
	oldNLMJob      = "nlm-6f4bb274778d052ea6cf817194698686"
	oldArtifact    = "art-ced4224c-6970-8cc5-ab6d-dd58f6283fa2"
	oldFutureField = "x_future_release"
)

// oldSlot is the slot of schedule upg-every the fixture fired last.
var oldSlot = time.Date(2026, 11, 20, 9, 10, 0, 0, time.UTC)

// upgradeAgents are the agents of the generator, by slug and step names:
// a step of the same name is what a run's step files name.
func upgradeAgents() []run.Agent {
	step := func(name, summary string) run.Step {
		return run.Step{Name: name, Idempotent: true, Resumable: true,
			Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: summary, Data: json.RawMessage(`{"step":"` + name + `"}`)}, nil
			}}
	}
	return []run.Agent{
		{Slug: "upg-research", Steps: []run.Step{step("load-context", "context loaded"),
			{Name: "create-proposal", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				id := "prop_" + in.RunID
				return run.StepOutput{Summary: "proposal created", Proposals: []string{id},
					Files: map[string][]byte{"proposal.json": []byte(`{"proposal_id":"` + id + `"}`)}}, nil
			}}}},
		{Slug: "upg-fail", Steps: []run.Step{step("prepare", "prepared"),
			{Name: "explode", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{}, errors.New("the fixture's step always fails")
			}}}},
		{Slug: "upg-approval", Machine: lifecycle.MachineApproval, Steps: []run.Step{
			{Name: "draft", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				return run.StepOutput{Summary: "draft ready", Await: &run.Await{Approval: "publish"}}, nil
			}},
			{Name: "publish", Idempotent: true, Resumable: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
				// The fixture's gate was parked before waits kept their step:
				// approved by today's code, its decision still reaches here.
				if in.Approval != nil {
					return run.StepOutput{Summary: "published " + string(in.Approval.Payload) + " by " + in.Approval.DecidedBy}, nil
				}
				return run.StepOutput{Summary: "published"}, nil
			}}}},
	}
}

// sinkPoster posts the NLM processor's callbacks to nlm.Sink in process,
// as the generator's callback URL (upgrade.invalid) cannot be reached.
type sinkPoster struct{ h atomic.Pointer[http.Handler] }

func (p *sinkPoster) Do(req *http.Request) (*http.Response, error) {
	h := p.h.Load()
	if h == nil {
		return nil, errors.New("no sink yet")
	}
	rec := httptest.NewRecorder()
	(*h).ServeHTTP(rec, req)
	return rec.Result(), nil
}

// copyTree copies the fixture into dir, returning every file's bytes by key.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot reads every file under dir, by key.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".cnv") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// addField rewrites the JSON object at key in dir with one more field, as
// a newer release might have written it.
func addField(t *testing.T, dir, key string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(key))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m[oldFutureField] = json.RawMessage(`{"kept":true}`)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFrom558b656: a store written by the code before issue 28's
// restructuring is read by today's Client through its public API, every
// record as it was written, and driven on: the run waiting for a runner,
// the job waiting for a worker, the run at an approval gate and the run
// waiting for its NLM job complete. Nothing the test did not drive is
// rewritten; a record today's code rewrites keeps the field a newer
// release wrote.
func TestUpgradeFrom558b656(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	copyTree(t, oldStore, dir)
	// Records this test drives, each given a field of a newer release.
	future := map[string]string{
		"run status": "agents/upg-approval/runs/" + oldApproval + "/status.json",
		"job":        "jobs/job-upg-queued.json",
		"NLM job":    "nlm/jobs/" + oldNLMJob + ".json",
		"inbox":      "inbox/inbox_upg_pending.json",
		"schedule":   "schedules/upg-every.json",
	}
	for _, key := range future {
		addField(t, dir, key)
	}
	before := snapshot(t, dir)

	store, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	// After the generator's last write (09:10:03), before the idempotency
	// records and the inbox entries expire.
	clk := clock.NewFake(time.Date(2026, 11, 20, 9, 15, 0, 0, time.UTC))
	poster := &sinkPoster{}
	c, err := conveyor.New(upgradeConfig(store, clk, poster))
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = nlm.Sink(c.Runs(), c.NLM())
	poster.h.Store(&h)

	checkOldRuns(ctx, t, c)
	checkOldJobs(ctx, t, c)
	checkOldCounts(ctx, t, c)
	checkOldRest(ctx, t, c)
	checkOldFieldsKnown(t, before)

	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := c.Stop(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}
	}
	defer stop()
	driveOld(ctx, t, c, clk)
	stop()

	after := snapshot(t, dir)
	checkUntouched(t, before, after)
	checkNewerFields(t, future, after)
	checkOldJobOnSpecMachine(ctx, t, store, clk.Now(), after["jobs/job-upg-queued.json"])
}

// checkOldJobOnSpecMachine: the fixture's QUEUED job, of a user type
// (UPG_ECHO) but written before jobs recorded their machine, ran on the
// spec's machine, as it would have when it was written (its pickup into
// CONTEXT_ASSEMBLY or NOTEBOOKLM_CALL, never the general machine's
// RUNNING), and its record still names no machine.
func checkOldJobOnSpecMachine(ctx context.Context, t *testing.T, store *storage.Store, now time.Time, rec []byte) {
	t.Helper()
	if bytes.Contains(rec, []byte(`"machine"`)) {
		t.Errorf("the old job's record gained a machine: %s", rec)
	}
	var path []string
	for day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC); !day.After(now); day = day.Add(24 * time.Hour) {
		for e, err := range records.ReadAuditDay(ctx, store, day) {
			if err != nil {
				t.Fatal(err)
			}
			if e.JobID == "job-upg-queued" && strings.HasPrefix(e.Event, "job.") {
				path = append(path, e.To)
			}
		}
	}
	want := []string{"PENDING", "QUEUED", "NOTEBOOKLM_CALL", "ARTIFACT_WRITE", "COMPLETE"}
	if len(path) < 3 || fmt.Sprint(path[len(path)-3:]) != fmt.Sprint(want[2:]) {
		t.Errorf("the old job moved through %v, want it to end %v (the spec's machine)", path, want[2:])
	}
}

// upgradeConfig is the Client of the generator's agents, job types, NLM
// backend and schedule, on clk, posting NLM callbacks through poster.
func upgradeConfig(store *storage.Store, clk clock.Clock, poster nlm.Poster) conveyor.Config {
	return conveyor.Config{Store: store, Clock: clk, Owner: "upgrade-test", Node: "upgrade-node",
		Logger: slog.New(slog.DiscardHandler),
		Agents: upgradeAgents(),
		NLMStages: nlm.Stages{Query: func(ctx context.Context, req lifecycle.NLMRequest, prompt string) (json.RawMessage, error) {
			return json.RawMessage(`{"title":"Brief","body":"answer","word_count":1}`), nil
		}},
		NLM: nlm.Config{CallbackURL: "http://upgrade.invalid/nlm/callback", Client: poster},
		NLMAgents: func(p *nlm.Processor) []run.Agent {
			return []run.Agent{{Slug: "upg-nlm", Machine: lifecycle.MachineApproval,
				Steps: nlm.Ask(p, "ask", func(ctx context.Context, in run.StepInput) (lifecycle.NLMRequest, error) {
					return lifecycle.NLMRequest{JobType: lifecycle.JobBrief, Query: "what changed?"}, nil
				})}}
		},
		JobTypes: map[lifecycle.JobType]jobqueue.TypeConfig{
			"UPG_ECHO": {Handler: jobqueue.Typed(func(ctx context.Context, name string) (string, error) {
				return "hello, " + name, nil
			})},
			"UPG_FAIL": {Handler: jobqueue.HandlerFunc(func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
				return lifecycle.JobOutput{}, errors.New("the fixture's handler always fails")
			})},
		},
		Schedules: []lifecycle.Schedule{{ID: "upg-every", Agent: "upg-research", Every: 10 * time.Minute}},
	}
}

// runWant is what a run of the fixture reads back as.
type runWant struct {
	agent, status, trigger, machine, key, current string
	steps, done, proposals                        int
	failed, finished                              bool
	stepStates                                    []string
}

func checkOldRuns(ctx context.Context, t *testing.T, c *conveyor.Client) {
	t.Helper()
	ok := []string{"completed", "completed"}
	wants := map[string]runWant{
		oldCompleted: {agent: "upg-research", status: "completed", trigger: "manual", current: "create-proposal", steps: 2, done: 2, proposals: 1, finished: true, stepStates: ok},
		oldKeyed:     {agent: "upg-research", status: "completed", trigger: "manual", key: oldKey, current: "create-proposal", steps: 2, done: 2, proposals: 1, finished: true, stepStates: ok},
		oldScheduled: {agent: "upg-research", status: "completed", trigger: "cron", key: "scheduler:upg-every:2026-11-20T09:10:00Z", current: "create-proposal", steps: 2, done: 2, proposals: 1, finished: true, stepStates: ok},
		oldRequested: {agent: "upg-research", status: "requested", trigger: "manual", steps: 2},
		oldFailed:    {agent: "upg-fail", status: "failed", trigger: "manual", current: "explode", steps: 2, done: 1, failed: true, finished: true, stepStates: []string{"completed", "failed"}},
		oldApproval:  {agent: "upg-approval", status: "awaiting_approval", trigger: "manual", machine: lifecycle.MachineApproval, current: "publish", steps: 2, done: 1, stepStates: []string{"completed"}},
		oldNLMRun:    {agent: "upg-nlm", status: "waiting_external", trigger: "manual", machine: lifecycle.MachineApproval, current: "ask-result", steps: 2, done: 1, stepStates: []string{"completed"}},
	}
	listed := map[string]bool{}
	for _, slug := range []string{"upg-research", "upg-fail", "upg-approval", "upg-nlm"} {
		runs, err := c.Runs().Runs(ctx, slug)
		if err != nil {
			t.Fatalf("Runs(%s): %v", slug, err)
		}
		for _, st := range runs {
			listed[st.RunID] = true
		}
	}
	for id, w := range wants {
		if !listed[id] {
			t.Errorf("run %s of %s is not listed", id, w.agent)
		}
		st, err := c.Runs().Status(ctx, id)
		if err != nil {
			t.Errorf("Status(%s): %v", id, err)
			continue
		}
		got := runWant{agent: st.AgentSlug, status: st.Status, trigger: st.Trigger, machine: st.Machine, key: st.IdempotencyKey,
			current: st.CurrentStep, steps: st.StepsTotal, done: st.StepsCompleted, proposals: len(st.ProposalsCreated),
			failed: st.Error != nil, finished: st.FinishedAt != nil}
		stepStates := w.stepStates
		w.stepStates = nil
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("run %s reads\n %+v\nwant\n %+v", id, got, w)
		}
		if st.RunID != id || st.StartedAt.IsZero() || st.Version < 1 {
			t.Errorf("run %s: id %q, started_at %v, version %d", id, st.RunID, st.StartedAt, st.Version)
		}
		if w.finished && st.DurationMS != st.FinishedAt.Sub(st.StartedAt).Milliseconds() {
			t.Errorf("run %s: duration %d ms, from %v to %v", id, st.DurationMS, st.StartedAt, st.FinishedAt)
		}
		if w.failed && !strings.Contains(*st.Error, "the fixture's step always fails") {
			t.Errorf("run %s: error %q", id, *st.Error)
		}
		if id == oldApproval && (st.Approval == nil || st.Approval.Action != "publish" || st.Approval.RequestedAt.IsZero()) {
			t.Errorf("run %s: approval %+v, want the publish gate", id, st.Approval)
		}
		if id == oldNLMRun && (st.External == nil || st.External.EventType == "" || st.External.Deadline.IsZero()) {
			t.Errorf("run %s: external wait %+v", id, st.External)
		}
		checkOldSteps(ctx, t, c, id, stepStates)
	}
	// The keyed run's key answers the same run again, and creates none.
	res, err := c.Runs().Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "upg-research", IdempotencyKey: oldKey,
		Input: json.RawMessage(`{"topic":"upgrade"}`)})
	if err != nil || res.RunID != oldKeyed {
		t.Errorf("re-submit of %s: %+v, %v; want run %s", oldKey, res, err, oldKeyed)
	}
	// The old records are the default tenant's: another tenant neither
	// reads nor lists them (its keys: TestTenantAttack).
	acme := lifecycle.WithTenant(ctx, "acme")
	if _, err := c.Runs().Status(acme, oldKeyed); !errors.Is(err, lifecycle.ErrRunNotFound) {
		t.Errorf("tenant acme reads the old run %s: %v, want not found", oldKeyed, err)
	}
	if runs, err := c.Runs().ListRuns(acme, run.RunQuery{}); err != nil || len(runs.Runs) != 0 {
		t.Errorf("tenant acme lists %d old runs, %v; want none", len(runs.Runs), err)
	}
}

func checkOldJobs(ctx context.Context, t *testing.T, c *conveyor.Client) {
	t.Helper()
	for _, w := range []struct {
		id       string
		status   lifecycle.JobState
		attempt  int
		artifact string
	}{
		{"job-upg-done", lifecycle.JobComplete, 1, oldArtifact},
		{"job-upg-dead", lifecycle.JobDead, 2, ""},
		{"job-upg-queued", lifecycle.JobQueued, 0, ""},
	} {
		j, err := c.Jobs().Job(ctx, w.id)
		if err != nil {
			t.Errorf("Job(%s): %v", w.id, err)
			continue
		}
		if j.Status != w.status || j.Attempt != w.attempt || j.ArtifactID != w.artifact || j.AgentSlug != "upg-jobs" || j.CreatedAt.IsZero() {
			t.Errorf("job %s reads %s attempt %d artifact %q agent %q; want %s, %d, %q", w.id, j.Status, j.Attempt, j.ArtifactID, j.AgentSlug, w.status, w.attempt, w.artifact)
		}
		if w.status == lifecycle.JobDead && (j.Error == nil || !strings.Contains(*j.Error, "always fails")) {
			t.Errorf("dead job's error: %v", j.Error)
		}
	}
	art, err := c.Jobs().Result(ctx, "job-upg-done")
	if err != nil || art.ArtifactID != oldArtifact || string(art.Content) != `"hello, fixture"` || !art.Finalized || art.Type != "UPG_ECHO" {
		t.Errorf("the done job's artifact: %+v, %v", art, err)
	}
	n := 0
	for j, err := range c.Jobs().List(ctx, lifecycle.ActorAdmin) {
		if err != nil {
			t.Fatalf("List jobs: %v", err)
		}
		if strings.HasPrefix(j.JobID, "job-upg-") {
			n++
		}
	}
	if n != 3 {
		t.Errorf("jobs listed: %d, want 3", n)
	}
}

func checkOldRest(ctx context.Context, t *testing.T, c *conveyor.Client) {
	t.Helper()
	want := map[string]lifecycle.InboxState{"inbox_upg_pending": lifecycle.InboxPending,
		"inbox_upg_processed": lifecycle.InboxProcessed, "inbox_upg_rejected": lifecycle.InboxRejected}
	got := map[string]lifecycle.InboxState{}
	for e, err := range c.Inbox().List(ctx, inbox.ListOptions{}) {
		if err != nil {
			t.Fatalf("inbox List: %v", err)
		}
		got[e.ID] = e.Status
		if e.Source.Identity != "owner" || e.Intent.Action != "research" || e.Metadata.CorrelationID != "corr-"+e.ID || e.CreatedAt.IsZero() {
			t.Errorf("inbox entry %s reads %+v", e.ID, e)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("inbox lists %v, want %v", got, want)
	}
	if e, err := c.Inbox().Get(ctx, "inbox_upg_processed"); err != nil || e.ProposalID != "prop_upg_1" {
		t.Errorf("processed entry: %+v, %v", e, err)
	}
	infos, err := c.Schedules().List(ctx)
	if err != nil || len(infos) != 1 || infos[0].LastRunID != oldScheduled ||
		!infos[0].LastSlot.Equal(oldSlot) {
		t.Errorf("schedules: %+v, %v", infos, err)
	}
	if j, err := c.NLM().Get(ctx, oldNLMJob); err != nil || j.Status != lifecycle.NLMAccepted || j.Request.RunID != oldNLMRun {
		t.Errorf("NLM job: %+v, %v", j, err)
	}
	// The audit log: every event decodes into today's type with no field
	// left over, and names what it is about.
	events := 0
	for key, err := range c.Store().List(ctx, "audit/") {
		if err != nil {
			t.Fatalf("audit list: %v", err)
		}
		b, _, err := c.Store().Get(ctx, key)
		if err != nil {
			t.Fatalf("audit %s: %v", key, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var ev lifecycle.AuditEvent
		if err := dec.Decode(&ev); err != nil {
			t.Errorf("audit %s does not decode: %v", key, err)
			continue
		}
		if ev.TS.IsZero() || ev.Event == "" || ev.RunID+ev.JobID+ev.EntryID+ev.ArtifactID == "" {
			t.Errorf("audit %s reads %+v", key, ev)
		}
		events++
	}
	if events != 37 {
		t.Errorf("audit events: %d, want the fixture's 37", events)
	}
}

// The stored forms of a job, an NLM job and an inbox entry: the public
// record, the write counter and, for a job, the queue's two fields of
// its own (jobqueue's unexported jobDoc, the NLM processor's jobDoc and the
// Box's entryDoc have these fields).
type (
	storedJob struct {
		lifecycle.Meta
		lifecycle.Job
		AuditArtifact string `json:"audit_artifact,omitempty"`
		RanEpoch      int64  `json:"ran_epoch,omitempty"`
	}
	storedNLMJob struct {
		lifecycle.Meta
		lifecycle.NLMJob
	}
	storedEntry struct {
		lifecycle.Meta
		lifecycle.InboxEntry
	}
)

// checkOldFieldsKnown decodes every record of the fixture of a kind
// today's code rewrites into today's type, refusing unknown fields: a field
// the earlier release wrote that today's type lacks would be dropped by
// today's next write of that record.
func checkOldFieldsKnown(t *testing.T, files map[string][]byte) {
	t.Helper()
	kinds := []struct {
		match func(key string) bool
		new   func() any
	}{
		{func(k string) bool { return strings.HasSuffix(k, "/status.json") }, func() any { return new(lifecycle.RunStatus) }},
		{func(k string) bool { return strings.Contains(k, "/steps/") }, func() any { return new(lifecycle.StepRecord) }},
		{func(k string) bool { return strings.HasPrefix(k, "jobs/") }, func() any { return new(storedJob) }},
		{func(k string) bool { return strings.HasPrefix(k, "nlm/jobs/") }, func() any { return new(storedNLMJob) }},
		{func(k string) bool { return strings.HasPrefix(k, "inbox/") }, func() any { return new(storedEntry) }},
		{func(k string) bool { return strings.HasPrefix(k, "projects/") }, func() any { return new(artifact.Artifact) }},
		{func(k string) bool { return strings.HasPrefix(k, "idempotency/") }, func() any { return new(idemrecord.Record) }},
		{func(k string) bool { return strings.HasPrefix(k, "schedules/") }, func() any { return new(schedule.State) }},
	}
	n := 0
	for key, b := range files {
		for _, kind := range kinds {
			if !kind.match(key) {
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%s: %v", key, err)
				break
			}
			delete(m, oldFutureField) // the test's own, checked by checkNewerFields
			b, _ = json.Marshal(m)
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(kind.new()); err != nil {
				t.Errorf("%s: a field today's %T lacks: %v", key, kind.new(), err)
			}
			n++
			break
		}
	}
	if n != 28 {
		t.Errorf("records decoded strictly: %d, want the fixture's 28", n)
	}
}

// checkOldSteps checks the step files of run id read back.
func checkOldSteps(ctx context.Context, t *testing.T, c *conveyor.Client, id string, stepStates []string) {
	t.Helper()
	steps, err := c.Runs().Steps(ctx, id)
	if err != nil {
		t.Errorf("Steps(%s): %v", id, err)
		return
	}
	var states []string
	for i, s := range steps {
		states = append(states, string(s.Status))
		if s.StepNumber != i+1 || s.StepName == "" || s.StartedAt == nil || s.Attempts < 1 {
			t.Errorf("run %s step %d reads %+v", id, i+1, s)
		}
	}
	if fmt.Sprint(states) != fmt.Sprint(stepStates) {
		t.Errorf("run %s steps %v, want %v", id, states, stepStates)
	}
	if id == oldFailed && (len(steps) != 2 || steps[1].Attempts != 4 || !strings.Contains(steps[1].Error, "always fails")) {
		t.Errorf("failed run's steps: %+v, want the last with 4 attempts and its error", steps)
	}
	if id == oldCompleted && (len(steps) != 2 || steps[0].OutputSummary != "context loaded" || string(steps[0].Output) != `{"step":"load-context"}`) {
		t.Errorf("completed run's steps: %+v", steps)
	}
}

// driveOld moves the clock until the fixture's waiting work is done: the
// run waiting for a runner, the job waiting for a worker, the approved run
// and the run waiting for its NLM job; and the schedule's next slot.
func driveOld(ctx context.Context, t *testing.T, c *conveyor.Client, clk *clock.Fake) {
	t.Helper()
	if _, err := c.Runs().Approve(ctx, oldApproval, lifecycle.ActorGateway, run.Decision{DecidedBy: "owner", Reason: "upgrade",
		Payload: json.RawMessage(`{"from":"558b656"}`)}); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if _, err := c.Inbox().Process(ctx, lifecycle.ActorGateway, "inbox_upg_pending", "prop_upg_2"); err != nil {
		t.Errorf("Process: %v", err)
	}
	done := func() (bool, error) {
		for _, id := range []string{oldRequested, oldApproval, oldNLMRun} {
			st, err := c.Runs().Status(ctx, id)
			if err != nil || st.Status != "completed" {
				return false, err
			}
		}
		if infos, err := c.Schedules().List(ctx); err != nil || len(infos) != 1 || !infos[0].LastSlot.After(oldSlot) {
			return false, err
		}
		j, err := c.Jobs().Job(ctx, "job-upg-queued")
		return j.Status == lifecycle.JobComplete, err
	}
	for i := 0; ; i++ {
		ok, err := done()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if i == 2000 || ctx.Err() != nil {
			for _, id := range []string{oldRequested, oldApproval, oldNLMRun} {
				st, _ := c.Runs().Status(ctx, id)
				t.Logf("run %s: %s %v", id, st.Status, st.Error)
			}
			j, _ := c.Jobs().Job(ctx, "job-upg-queued")
			t.Fatalf("not done by %v: job %s", clk.Now(), j.Status)
		}
		if _, _, err := clk.AdvanceToNext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A document of 558b656 has no schema_version and no updated_at
	// (read as version 1); written by this release, it has both.
	if st, err := c.Runs().Status(ctx, oldCompleted); err != nil || st.SchemaVersion != 0 || st.UpdatedAt != nil {
		t.Errorf("untouched old run: schema_version %d, updated_at %v (%v); want neither", st.SchemaVersion, st.UpdatedAt, err)
	}
	if st, err := c.Runs().Status(ctx, oldRequested); err != nil || st.SchemaVersion != 1 || st.UpdatedAt == nil {
		t.Errorf("old run finished now: schema_version %d, updated_at %v (%v); want 1 and a time", st.SchemaVersion, st.UpdatedAt, err)
	}
	if steps, err := c.Runs().Steps(ctx, oldApproval); err != nil || len(steps) != 2 || steps[1].OutputSummary != `published {"from":"558b656"} by owner` {
		t.Errorf("the old gate's next step after the approval: %+v, %v", steps, err)
	}
	if art, err := c.Jobs().Result(ctx, "job-upg-queued"); err != nil || string(art.Content) != `"hello, later"` {
		t.Errorf("queued job's artifact: %s, %v", art.Content, err)
	}
	if j, err := c.NLM().Get(ctx, oldNLMJob); err != nil || j.Status != lifecycle.NLMDone || j.ArtifactID == "" {
		t.Errorf("NLM job after the drive: %+v, %v", j, err)
	}
	for _, id := range []string{oldApproval, oldNLMRun} {
		st, err := c.Runs().Status(ctx, id)
		if err != nil || st.StepsCompleted != 2 || st.Error != nil {
			t.Errorf("run %s: %+v, %v", id, st, err)
		}
	}
}

// untouched are the keys of records no move of the test is about: the
// finished runs, the finished jobs and their artifact, the idempotency
// records, the decided inbox entries and the audit events. The fixture's
// bytes must be there still.
func untouched(key string) bool {
	for _, p := range []string{
		"agents/upg-research/runs/" + oldCompleted + "/", "agents/upg-research/runs/" + oldKeyed + "/",
		"agents/upg-research/runs/" + oldScheduled + "/", "agents/upg-fail/runs/" + oldFailed + "/",
		"jobs/job-upg-done.json", "jobs/job-upg-dead.json", "projects/", "idempotency/",
		"inbox/inbox_upg_processed.json", "inbox/inbox_upg_rejected.json", "audit/",
	} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func checkUntouched(t *testing.T, before, after map[string][]byte) {
	t.Helper()
	n := 0
	for key, b := range before {
		if !untouched(key) {
			continue
		}
		n++
		if a, ok := after[key]; !ok {
			t.Errorf("%s: gone", key)
		} else if !bytes.Equal(a, b) {
			t.Errorf("%s: rewritten\nbefore %s\nafter  %s", key, b, a)
		}
	}
	if n < 60 {
		t.Errorf("only %d untouched records compared", n)
	}
}

// checkNewerFields: every record kind the test drives keeps, through
// today's rewrites, the field a newer release wrote, as it was written: no
// process drops fields it does not know (docs/stores.md, "Upgrades").
func checkNewerFields(t *testing.T, future map[string]string, after map[string][]byte) {
	t.Helper()
	for kind, key := range future {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(after[key], &m); err != nil {
			t.Errorf("%s %s: %v", kind, key, err)
			continue
		}
		switch v, kept := m[oldFutureField]; {
		case !kept:
			t.Errorf("%s (%s): today's rewrite dropped the field %s a newer release wrote", kind, key, oldFutureField)
		case string(v) != `{"kept":true}`:
			t.Errorf("%s (%s): %s is %s, not as the newer release wrote it", kind, key, oldFutureField, v)
		}
	}
}
