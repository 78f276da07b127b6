package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// childEnv, set, makes the test binary the worker program itself: the
// integration tests start Worker processes by re-executing it.
const childEnv = "CONVEYOR_WORKER_TEST_CHILD"

// nofileEnv, set with childEnv, is the child's RLIMIT_NOFILE.
const nofileEnv = "CONVEYOR_WORKER_TEST_NOFILE"

var (
	minio   miniotest.Shared
	cluster miniotest.SharedCluster
)

func TestMain(m *testing.M) {
	if os.Getenv(writerEnv) != "" {
		conditionalWriter()
		os.Exit(0)
	}
	if os.Getenv(childEnv) != "" {
		if n := os.Getenv(nofileEnv); n != "" {
			// The descriptor limit of the attacked process.
			v, err := strconv.ParseUint(n, 10, 64)
			if err == nil {
				err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: v, Max: v})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "setting the descriptor limit:", err)
				os.Exit(2)
			}
		}
		main()
		os.Exit(0)
	}
	code := m.Run()
	_ = minio.Stop()
	_ = cluster.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestWorkerInProcess is the README's first command, in-process: the
// Worker on a fresh directory answers the API, runs the demo agent to
// completed, streams its events, counts it in /metrics, serves the page,
// and stops within its drain time.
func TestWorkerInProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"-addr", "127.0.0.1:0", "-data", t.TempDir(), "-step-pause", "30ms", "-poll", "50ms", "-drain", "5s"},
			io.Discard, io.Discard, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("worker ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not start in 30 s")
	}
	base := "http://" + addr
	c := &client.Client{BaseURL: base}
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()

	res, err := c.Submit(tctx, lifecycle.SubmitRequest{AgentSlug: AgentResearch})
	if err != nil {
		t.Fatal(err)
	}
	// The stream, opened before the run can end, shows its events.
	seen := make(chan string, 64)
	sctx, scancel := context.WithCancel(tctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		for ev, err := range c.Events(sctx, "", res.RunID) {
			if err != nil {
				return
			}
			seen <- ev.Type
		}
	}()
	st, err := c.Wait(tctx, res.RunID)
	if err != nil || st.Status != "completed" || st.StepsCompleted != 3 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	want := map[string]bool{"run.status.changed": false, "run.step.completed": false}
	for !want["run.status.changed"] || !want["run.step.completed"] {
		select {
		case typ := <-seen:
			want[typ] = true
		case <-tctx.Done():
			t.Fatalf("event stream: saw %v", want)
		}
	}
	scancel()
	swg.Wait()

	// The agent that waits for approval, approved through the API; the
	// one that asks the NLM simulator, resumed by its callback.
	gated, err := c.Submit(tctx, lifecycle.SubmitRequest{AgentSlug: AgentApproval})
	if err != nil {
		t.Fatal(err)
	}
	asked, err := c.Submit(tctx, lifecycle.SubmitRequest{AgentSlug: AgentNLM})
	if err != nil {
		t.Fatal(err)
	}
	var before string // an event before the job's: the job's stream resumes after it
	for ev, err := range c.Events(tctx, "", gated.RunID) {
		if err != nil {
			t.Fatalf("waiting for the gate: %v", err)
		}
		if p, _ := ev.Payload(); p.Status == "awaiting_approval" {
			before = ev.ID
			break
		}
	}
	if _, err := c.Decide(tctx, gated.RunID, true, "owner", "looks good", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{gated.RunID, asked.RunID} {
		if st, err := c.Wait(tctx, id); err != nil || st.Status != "completed" {
			t.Errorf("run %s: %+v, %v", id, st, err)
		}
	}

	// A job through the queue: the demo handler answers as NotebookLM,
	// the artifact is written, the job is COMPLETE.
	job, err := c.Enqueue(tctx, lifecycle.NewJob{RunID: res.RunID, JobType: lifecycle.JobBrief, AgentSlug: AgentResearch})
	if err != nil {
		t.Fatal(err)
	}
	// Resumed from before the enqueue, the stream replays the job's every
	// move from the store, so it cannot miss the last one.
	for ev, err := range c.Events(tctx, before, "") {
		if err != nil {
			t.Fatalf("waiting for the job: %v", err)
		}
		if p, _ := ev.Payload(); p.JobID == job.JobID && p.Status == string(lifecycle.JobComplete) {
			break
		}
	}

	for path, needle := range map[string]string{
		"/metrics": `gwi_run_transitions_total`,
		"/ui/":     "<html",
		"/healthz": `"ok":true`,
	} {
		body := get(t, base+path)
		if !strings.Contains(body, needle) {
			t.Errorf("GET %s: %q not in %.300s", path, needle, body)
		}
	}
	// The runtime's and the API's own metrics, the latter by route pattern.
	if body := get(t, base+"/metrics"); !strings.Contains(body, "\ngo_goroutines ") || !strings.Contains(body, "\nprocess_cpu_seconds_total ") ||
		!strings.Contains(body, `conveyor_http_requests_total{method="GET",route="/healthz",status="200"} `) {
		t.Errorf("/metrics lacks the Go, process or HTTP metrics:\n%s", grepLines(body, "conveyor_http_requests_total"))
	}
	if body := get(t, base+"/metrics"); !regexp.MustCompile(`gwi_run_duration_seconds_count\{[^}]*status="completed"[^}]*\} 1`).MatchString(body) {
		t.Errorf("/metrics does not count the completed run:\n%s", grepLines(body, "gwi_run_duration"))
	}

	begin := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not stop within its 5 s drain")
	}
	t.Logf("stopped in %s", time.Since(begin).Round(time.Millisecond))
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// proc is a Worker process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr chan string
	done chan error
	// storeTrouble counts the log lines in which the process met a
	// store's fault: an endpoint down, a call retried or refused for the
	// store's trouble, a write whose outcome was unknown.
	storeTrouble atomic.Int64
	// ran lists the runs the process logged completing, in order.
	ranMu sync.Mutex
	ran   []string
}

// completed returns the runs p logged completing so far.
func (p *proc) completed() []string {
	p.ranMu.Lock()
	defer p.ranMu.Unlock()
	return slices.Clone(p.ran)
}

var (
	listening    = regexp.MustCompile(`API http://([0-9.:]+),`)
	storeTrouble = regexp.MustCompile(`s3_endpoint_down|store_retrying|store_unavailable|outcome unknown`)
	runCompleted = regexp.MustCompile(`"msg":"run_completed".*?"runId":"([^"]+)"`)
)

// start runs the worker program as a process with args and env.
func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, addr: make(chan string, 1), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &strings.Builder{}
	logCap := 1 << 20
	if os.Getenv("CONVEYOR_TEST_LOG_DIR") != "" {
		logCap = 256 << 20 // the whole log is written out on failure
	}
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := listening.FindStringSubmatch(line); m != nil {
				p.addr <- m[1]
			}
			if storeTrouble.MatchString(line) {
				p.storeTrouble.Add(1)
			}
			if m := runCompleted.FindStringSubmatch(line); m != nil {
				p.ranMu.Lock()
				p.ran = append(p.ran, m[1])
				p.ranMu.Unlock()
			}
			mu.Lock()
			if logs.Len() < logCap {
				logs.WriteString(line + "\n")
			}
			mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("--- %s's log (tail):\n%s", name, tail(logs.String(), 40))
			if dir := os.Getenv("CONVEYOR_TEST_LOG_DIR"); dir != "" {
				_ = os.WriteFile(dir+"/"+strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log", []byte(logs.String()), 0o644)
			}
			mu.Unlock()
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop sends SIGTERM and waits for the process to drain and exit.
func (p *proc) stop(t *testing.T, within time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup's wait
		if err != nil {
			t.Errorf("%s exited: %v", p.name, err)
		}
	case <-time.After(within):
		t.Errorf("%s did not stop within %s of SIGTERM", p.name, within)
	}
}

// TestWorkersShareAStore is the README's deployment: one API process and two
// runner processes on one store (a directory, a SQLite file, a MinIO bucket). The
// client submits 100 runs and follows them over the event stream; one
// runner is killed -9 midway, and every run still completes: the survivor
// takes the dead one's runs over when their leases lapse.
func TestWorkersShareAStore(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"filestore", "sqlite", "minio"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var env, storeArgs []string
			switch store {
			case "filestore":
				storeArgs = []string{"-data", t.TempDir(), "-store", "files"}
			case "sqlite":
				storeArgs = []string{"-data", t.TempDir()}
			case "minio":
				srv := minio.Get(t)
				bucket, err := srv.CreateBucket(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				storeArgs = []string{"-s3-bucket", bucket, "-s3-endpoint", srv.Endpoint}
				env = []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region}
			}
			common := append([]string{"-step-pause", "20ms", "-poll", "100ms", "-idle-poll", "200ms", "-lease", "3s", "-drain", "5s"}, storeArgs...)
			api := start(t, "api", env, append([]string{"-role", "api", "-addr", "127.0.0.1:0"}, common...)...)
			r1 := start(t, "runner-1", env, append([]string{"-role", "runner", "-addr", "", "-owner", "runner-1"}, common...)...)
			r2 := start(t, "runner-2", env, append([]string{"-role", "runner", "-addr", "", "-owner", "runner-2"}, common...)...)
			var addr string
			select {
			case addr = <-api.addr:
			case err := <-api.done:
				t.Fatalf("api exited: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("api did not start in 60 s")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := &client.Client{BaseURL: "http://" + addr}

			// The stream is opened before the first submit, so it sees
			// every run's every change.
			type change struct{ runID, status string }
			changes := make(chan change, 1024)
			sctx, scancel := context.WithCancel(ctx)
			streamDone := make(chan error, 1)
			go func() {
				defer close(changes)
				for ev, err := range c.Events(sctx, "", "") {
					if err != nil {
						streamDone <- err
						return
					}
					if p, err := ev.Payload(); err == nil && ev.Type == "run.status.changed" {
						changes <- change{p.RunID, p.Status}
					}
				}
			}()
			defer func() {
				scancel()
				for range changes { // until the reader ends
				}
			}()

			const n = 100
			ids := map[string]bool{}
			for i := range n {
				res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: AgentResearch, IdempotencyKey: fmt.Sprintf("api:test:%d", i)})
				if err != nil {
					t.Fatalf("submit %d: %v", i, err)
				}
				ids[res.RunID] = true
			}
			done := map[string]string{}
			killed := false
			// The stream shows the runs end; a run whose end has no event
			// (its runner was killed between the status write and its audit
			// object) is found by Client.Wait's status reads, as a client
			// polls (docs/spec.md#polling). Most must come over the stream.
		follow:
			for len(done) < n {
				select {
				case ch, ok := <-changes:
					if !ok {
						t.Logf("event stream ended: %v (%d of %d runs ended)", <-streamDone, len(done), n)
						break follow
					}
					if ids[ch.runID] && (ch.status == "completed" || ch.status == "failed") {
						done[ch.runID] = ch.status
					}
					if !killed && len(done) >= n/5 {
						killed = true
						_ = r1.cmd.Process.Kill() // kill -9, mid-way
						t.Logf("killed runner-1 after %d runs ended", len(done))
					}
				case <-time.After(20 * time.Second):
					break follow // the stream is quiet: the rest are read below
				case <-ctx.Done():
					t.Fatalf("%d of %d runs ended (seen on the stream) before the deadline", len(done), n)
				}
			}
			streamed := len(done)
			for id := range ids {
				if _, ok := done[id]; ok {
					continue
				}
				st, err := c.Wait(ctx, id)
				if err != nil {
					t.Fatalf("run %s never ended: %v", id, err)
				}
				done[id] = st.Status
			}
			if streamed < n*9/10 {
				t.Errorf("only %d of %d runs' ends came over the event stream", streamed, n)
			}
			for id := range ids {
				st, err := c.Status(ctx, id)
				if err != nil || st.Status != "completed" || st.StepsCompleted != 3 {
					t.Errorf("run %s: %s (%d steps), %v; want completed", id, st.Status, st.StepsCompleted, err)
				}
			}
			resumed := 0
			runs, _, err := c.Runs(ctx, client.Query{Agent: AgentResearch, All: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range runs {
				if ids[st.RunID] && st.ResumeCount > 0 {
					resumed++
				}
			}
			t.Logf("%d runs completed, %d of them seen ending on the event stream; %d taken over from the killed runner", n, streamed, resumed)
			api.stop(t, 10*time.Second)
			r2.stop(t, 10*time.Second)
		})
	}
}

// TestRefusals: the Worker will not start exposed without tokens, nor on
// flags that make no sense; each says why.
func TestRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-addr", "0.0.0.0:0"}, "loopback"},
		{[]string{"-role", "boss"}, "want all, api or runner"},
		{[]string{"-role", "api", "-addr", ""}, "needs -addr"},
		{[]string{"-lease", "10ms"}, "-lease at least 1s"},
		{[]string{"-demo-concurrency", "0"}, "want at least 1"},
		{[]string{"-run-concurrency", "0"}, "-run-concurrency 0: want at least 1"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-retention", "-1h"}, "negative"},
		{[]string{"-retention-ages", "runs"}, "want kind=age"},
		{[]string{"-retention-ages", "runs=soon"}, "want a duration"},
		{[]string{"-retention-ages", "trash=1h"}, `unknown kind "trash"`},
		{[]string{"-store", "pebble"}, "want sqlite or files"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-data", t.TempDir()}, tt.args...)
			err := runWorker(context.Background(), args, io.Discard, io.Discard, func(string) { t.Error("the worker started") })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestRefusesADirectoryStore: a -data directory that holds a directory
// store (the default before SQLite) is named, with how to keep using it,
// rather than ignored beside a new SQLite file.
func TestRefusesADirectoryStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "agents/demo/x.json", []byte("{}"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	err = runWorker(t.Context(), []string{"-data", dir, "-addr", "127.0.0.1:0"}, io.Discard, io.Discard, func(string) { t.Error("the worker started") })
	for _, want := range []string{dir + " holds a directory store", "-store files", "conveyor copy -from dir:" + dir} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want one saying %q", err, want)
		}
	}
}

// TestSchedulesAndWebhooks: the Worker's -config file: a schedule fires a
// cron run on its own, another enqueues a job at each slot (a periodic
// job, listed with its job over HTTP), and a signed GitHub delivery
// routed to an agent starts an event run (a redelivery answers the same
// run).
func TestSchedulesAndWebhooks(t *testing.T) {
	// Not parallel: the secret is read from the environment.
	const secret = "It's a Secret to Everybody"
	t.Setenv("CONVEYOR_GITHUB_SECRET", secret)
	dir := t.TempDir()
	conf := dir + "/conveyor.json"
	if err := os.WriteFile(conf, []byte(`{
		"schedules": [{"id": "tick", "agent": "demo-research", "every": "1s"},
			{"id": "brief", "every": "1s", "job": {"job_type": "BRIEF", "agent_slug": "demo-briefs", "max_attempts": 2}}],
		"webhooks": [{"source": "github", "event": "pull_request.opened", "agent": "demo-research"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"-addr", "127.0.0.1:0", "-data", dir + "/data", "-config", conf,
			"-step-pause", "10ms", "-poll", "50ms", "-drain", "5s"}, io.Discard, io.Discard, func(a string) { addrc <- a })
	}()
	defer func() { cancel(); <-done }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("worker ended: %v", err)
	}
	c := &client.Client{BaseURL: "http://" + addr}
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()

	body := []byte(`{"action":"opened","number":7,"repository":{"full_name":"octo/repo"},"sender":{"login":"octocat"}}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	deliver := func() (int, string) {
		req, _ := http.NewRequestWithContext(tctx, http.MethodPost, "http://"+addr+"/webhooks/github", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			RunID string `json:"run_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.RunID
	}
	code, id := deliver()
	if code != http.StatusCreated || id == "" {
		t.Fatalf("delivery: %d, run %q", code, id)
	}
	if again, id2 := deliver(); again != code || id2 != id {
		t.Fatalf("redelivery: %d run %q, want %d run %q", again, id2, code, id)
	}
	st, err := c.Wait(tctx, id)
	if err != nil || st.Status != "completed" || st.Trigger != "event" {
		t.Fatalf("webhook run: %+v, %v", st, err)
	}

	// The schedules fire every second; the first run and job are listed.
	var cronRun, cronJob string
	for ev, err := range c.Events(tctx, "", "") {
		if err != nil {
			t.Fatalf("waiting for the schedules: %v", err)
		}
		_ = ev
		infos, err := c.Schedules(tctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 2 || infos[0].ID != "brief" || infos[0].Job == nil || infos[0].Job.JobType != lifecycle.JobBrief || infos[0].Agent != "" {
			t.Fatalf("schedules listed: %+v", infos)
		}
		cronJob, cronRun = infos[0].LastJobID, infos[1].LastRunID
		if cronRun != "" && cronJob != "" {
			break
		}
	}
	if st, err := c.Status(tctx, cronRun); err != nil || st.Trigger != "cron" || !strings.HasPrefix(st.IdempotencyKey, "scheduler:tick:") {
		t.Fatalf("the schedule's run: %+v, %v", st, err)
	}
	if j, err := c.Job(tctx, cronJob); err != nil || !strings.HasPrefix(j.JobID, "scheduler:brief:") || j.AgentSlug != "demo-briefs" || j.MaxAttempts != 2 {
		t.Fatalf("the schedule's job: %+v, %v", j, err)
	}
}

// TestRefusesAMissingBucket: pointed at a bucket that does not exist, the
// Worker does not start; it says so in one sentence and exits, where it
// used to say it served and then log a 404 on every poll.
func TestRefusesAMissingBucket(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-s3-bucket", "no-such-bucket-conveyor", "-s3-endpoint", srv.Endpoint, "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), childEnv+"=1",
		"AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey, "AWS_REGION="+srv.Region)
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("exit %v (context: %v), want a refusal to start:\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), `bucket "no-such-bucket-conveyor" does not exist`) || listening.Match(out) {
		t.Fatalf("want one sentence saying the bucket does not exist, and no API:\n%s", out)
	}
}

// TestPrintS3Lifecycle: -print-s3-lifecycle prints the bucket rules for
// -retention and its overrides, and starts nothing.
func TestPrintS3Lifecycle(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := runWorker(context.Background(), []string{"-retention", "168h", "-retention-ages", "audit=720h,artifacts=forever", "-print-s3-lifecycle"},
		&out, io.Discard, func(string) { t.Error("the worker started") })
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Rules []struct {
			ID         string
			Filter     struct{ Prefix string }
			Expiration struct{ Days int }
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &cfg); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	got := map[string]int{}
	for _, r := range cfg.Rules {
		got[r.Filter.Prefix] = r.Expiration.Days
	}
	want := map[string]int{"agents/demo-research/runs/": 7, "index/runs/": 7, "audit/": 30, "idempotency/": 1, "inbox/expired/": 7}
	for p, d := range want {
		if got[p] != d {
			t.Errorf("rule for %s: %d days, want %d (all: %v)", p, got[p], d, got)
		}
	}
	for _, p := range []string{"jobs/", "projects/"} {
		if _, ok := got[p]; ok {
			t.Errorf("a rule for %s, which is kept (DEAD jobs, artifacts)", p)
		}
	}
}

// TestRetentionJanitorRuns: with -retention, every process runs the
// janitor, an API-only one included: its first pass shows in /metrics.
func TestRetentionJanitorRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"-role", "api", "-addr", "127.0.0.1:0", "-data", t.TempDir(), "-retention", "168h", "-drain", "5s"},
			io.Discard, io.Discard, func(a string) { addrc <- a })
	}()
	defer func() { cancel(); <-done }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("worker ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not start in 30 s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(b), `conveyor_retention_passes_total{result="done"} 1`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retention pass in /metrics after 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
