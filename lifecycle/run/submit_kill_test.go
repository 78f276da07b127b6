package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Environment of a submitter process killed at one write (submitKillMain).
const (
	submitKillEnv    = "CONVEYOR_SUBMIT_KILL_DIR"
	submitKillAt     = "CONVEYOR_SUBMIT_KILL_AT"     // the write's position, from 1
	submitKillBefore = "CONVEYOR_SUBMIT_KILL_BEFORE" // "1": before the write, else after it
)

const submitKillKey = "api:retrying-client:req-1"

func submitKillRequest() lifecycle.SubmitRequest {
	return lifecycle.SubmitRequest{AgentSlug: "charged", IdempotencyKey: submitKillKey, Input: json.RawMessage(`{"amount":42}`)}
}

func submitKillAgent() run.Agent {
	return run.Agent{Slug: "charged", Steps: []run.Step{okStep("charge")}}
}

// killingStore is the submitter's store: at its at-th Put it kills its own
// process with SIGKILL, before or after the write lands. keys records the
// Puts in order.
type killingStore struct {
	driver.Store
	at     int32
	before bool
	n      atomic.Int32
	mu     sync.Mutex
	keys   []string
}

func (k *killingStore) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	i := k.n.Add(1)
	k.mu.Lock()
	k.keys = append(k.keys, key)
	k.mu.Unlock()
	if i == k.at && k.before {
		killSelf()
	}
	ver, err := k.Store.Put(ctx, key, v, c)
	if i == k.at {
		killSelf()
	}
	return ver, err
}

func killSelf() {
	p, _ := os.FindProcess(os.Getpid())
	_ = p.Kill() // SIGKILL: no deferred call, no flush
	select {}
}

// submitKillMain is the submitter: one idempotent Submit on the shared
// directory, killed at one of its writes.
func submitKillMain() int {
	dir := os.Getenv(submitKillEnv)
	fs, err := helperStore(dir) // MinIO when the parent says so
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	at, _ := strconv.Atoi(os.Getenv(submitKillAt))
	store := &killingStore{Store: fs, at: int32(at), before: os.Getenv(submitKillBefore) == "1"}
	r, err := run.NewRunner(run.Config{Store: storage.New(store), Owner: "submitter", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}, submitKillAgent())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res, err := r.Submit(context.Background(), submitKillRequest())
	fmt.Fprintf(os.Stderr, "not killed: %+v %v\n", res, err)
	return 3
}

// submitWrites are the keys one idempotent Submit writes, in order, named
// by kind: found by a Submit on a memstore.
func submitWrites(t *testing.T) []string {
	rec := &killingStore{Store: memstore.New()}
	r, err := run.NewRunner(run.Config{Store: storage.New(rec), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, submitKillAgent())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Submit(context.Background(), submitKillRequest()); err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, len(rec.keys))
	for i, k := range rec.keys {
		switch {
		case layout.IsIdempotencyKey(k) && i == 0:
			kinds[i] = "idempotency record"
		case layout.IsIdempotencyKey(k):
			kinds[i] = "idempotency record update"
		case strings.HasPrefix(k, layout.RunActivePrefix):
			kinds[i] = "active entry"
		case strings.HasSuffix(k, "/input.json"):
			kinds[i] = "input"
		case strings.HasSuffix(k, "/status.json"):
			kinds[i] = "status"
		case strings.HasPrefix(k, "audit/"):
			kinds[i] = "audit event"
		default:
			kinds[i] = "index entry " + strings.SplitN(k, "/", 3)[1]
		}
	}
	return kinds
}

// TestSubmitKilledAtEveryWrite: a submitter process is killed -9 at each
// write of an idempotent Submit, before and after the write lands, while
// its client retries the key every 0.2 s against another process, on a
// directory and on MinIO. The first answer the client gets names a run
// that exists at that moment and completes, and the key has exactly one
// run.
func TestSubmitKilledAtEveryWrite(t *testing.T) {
	t.Parallel()
	writes := submitWrites(t)
	t.Logf("an idempotent Submit writes %d keys: %s", len(writes), strings.Join(writes, ", "))
	stores := map[string]func(t *testing.T, dir string) ([]string, *storage.Store){
		"filestore": func(t *testing.T, dir string) ([]string, *storage.Store) {
			s, err := filestore.New(filepath.Join(dir, "store"))
			if err != nil {
				t.Fatal(err)
			}
			return nil, s
		},
		"sqlite": func(t *testing.T, dir string) ([]string, *storage.Store) {
			return []string{helperSQLite + "=1"}, sqliteFor(t, dir)
		},
		"minio": func(t *testing.T, _ string) ([]string, *storage.Store) {
			srv, bucket := env.MinIO(t)
			prefix := fmt.Sprintf("submit-kill-%d/", time.Now().UnixNano())
			return []string{helperS3Endpoint + "=" + srv.Endpoint, helperS3Bucket + "=" + bucket, helperS3Prefix + "=" + prefix,
				"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}, env.S3At(t, prefix)
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i, kind := range writes {
				for _, before := range []bool{true, false} {
					when := "after"
					if before {
						when = "before"
					}
					t.Run(fmt.Sprintf("%02d-%s-%s", i+1, when, strings.ReplaceAll(kind, " ", "-")), func(t *testing.T) {
						t.Parallel()
						dir := t.TempDir()
						vars, store := open(t, dir)
						submitKilledAt(t, dir, vars, store, i+1, before)
					})
				}
			}
		})
	}
}

func submitKilledAt(t *testing.T, dir string, vars []string, store *storage.Store, at int, before bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	flag := "0"
	if before {
		flag = "1"
	}
	cmd.Env = append(append(os.Environ(), submitKillEnv+"="+dir, submitKillAt+"="+strconv.Itoa(at), submitKillBefore+"="+flag), vars...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("the submitter was not killed: %v\n%s", err, stderr.String())
	}

	r, err := run.NewRunner(run.Config{Store: store, Owner: "survivor", PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, submitKillAgent())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The client retries its key until it gets an answer.
	var res lifecycle.SubmitResult
	for tries := 1; ; tries++ {
		res, err = r.Submit(ctx, submitKillRequest())
		if err == nil {
			break
		}
		if tries == 50 {
			t.Fatalf("no answer after %d tries: %v", tries, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := r.Status(ctx, res.RunID); err != nil {
		t.Fatalf("answered %+v: the run does not exist: %v", res, err)
	}
	st, err := r.Wait(ctx, res.RunID)
	if err != nil || st.Status != "completed" {
		t.Fatalf("run %s: %+v %v", res.RunID, st, err)
	}
	var runs []string
	for key, err := range store.List(ctx, layout.AgentsPrefix) {
		if err != nil {
			t.Fatal(err)
		}
		if _, id, ok := layout.ParseRunStatusKey(key); ok {
			runs = append(runs, id)
		}
	}
	if len(runs) != 1 || runs[0] != res.RunID {
		t.Fatalf("the key's runs %v, want one: %s", runs, res.RunID)
	}
	if again, err := r.Submit(ctx, submitKillRequest()); err != nil || again.RunID != res.RunID || !again.Duplicate {
		t.Fatalf("a later retry: %+v %v", again, err)
	}
}
