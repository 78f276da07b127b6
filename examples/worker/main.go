// Command worker is a Worker (docs/spec.md#platform-names): a Conveyor
// Client (package conveyor) built from its flags, with the HTTP API, event
// stream, metrics and live page mounted on it, demo agents and an NLM
// backend simulator, on a SQLite file (the default), a directory or
// S3/MinIO. README.md says how to run it: roles, stores, the start-up
// check, retention, tracing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runWorker(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// runWorker is the whole program, testable in-process: ready, when set, receives
// the address the HTTP server listens on (empty without one) once serving.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.printS3 {
		agents := []string{AgentResearch, AgentApproval, AgentNLM}
		if o.noDemo {
			agents = nil
		}
		b, err := retention.S3Lifecycle(retention.Config{Age: o.retention.Age, Ages: retention.ByName(o.retention.Ages)}, o.s3Prefix, agents)
		if err == nil {
			_, err = fmt.Fprintf(stdout, "%s\n", b)
		}
		return err
	}
	w, err := build(ctx, o, stderr)
	if err != nil {
		return err
	}
	return w.serve(ctx, ready)
}

// options are the command line; store and clock, set by tests, replace
// the store the flags name and the wall clock.
type options struct {
	addr, data, storeKind, role, owner, tokens, config string
	callbackURL                                        string
	s3Bucket, s3Endpoint, s3Prefix                     string
	s3Settle, pause, drain, poll, streamWrite          time.Duration
	idlePoll, lease                                    time.Duration
	logLevel                                           slog.Level
	noDemo, allowUnsafeStore, printS3, rollingUpgrade  bool
	demoConc, runConc                                  int
	retention                                          conveyor.RetentionConfig
	limits                                             httpapi.Limits
	store                                              *storage.Store
	clock                                              clock.Clock
}

// defaultIdlePoll is -idle-poll's default: three loops look for others'
// work (runs, jobs, NLM jobs), so an idle process lists about 3/5 times a
// second, within the one request a second an idle process may cost on S3
// with the sweeps and lock checks besides; work arriving after idleness is
// found within 5 s.
const defaultIdlePoll = 5 * time.Second

const (
	roleAll    = "all"
	roleAPI    = "api"
	roleRunner = "runner"
)

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "HTTP address (-role all and api); empty serves no HTTP")
	fs.StringVar(&o.data, "data", "./data", "directory of the embedded store (unless -s3-bucket is set)")
	fs.StringVar(&o.storeKind, "store", storeopen.SQLite, "the embedded store in -data: sqlite (one file, "+storeopen.DBFile+") or files (a file per record, filestore's layout: slower, readable with jq)")
	fs.StringVar(&o.role, "role", roleAll, "all: HTTP and execution; api: HTTP only (reads the store, submits); runner: executes runs and jobs")
	fs.StringVar(&o.owner, "owner", "", "this process's name in leases: distinct per process sharing a store (default: host and executable name, stable across restarts)")
	fs.StringVar(&o.tokens, "tokens", "", "file of bearer tokens, `token actor` per line (also CONVEYOR_TOKENS=tok=actor,...); none: loopback only")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "DEBUG shows every state change")
	fs.StringVar(&o.s3Bucket, "s3-bucket", os.Getenv("CONVEYOR_S3_BUCKET"), "S3/MinIO bucket instead of -data (env CONVEYOR_S3_BUCKET)")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 API URL, e.g. http://127.0.0.1:9000 for MinIO, or the comma-separated URLs of a MinIO cluster's nodes to fail over between (default CONVEYOR_S3_ENDPOINTS, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)")
	fs.DurationVar(&o.s3Settle, "s3-settle", 0, "how long the store may answer wrongly after a node restarts: 0 finds out (40s on a MinIO cluster, else none), negative none")
	fs.StringVar(&o.s3Prefix, "s3-prefix", os.Getenv("CONVEYOR_S3_PREFIX"), "key prefix in the bucket, ending in /")
	fs.DurationVar(&o.pause, "step-pause", 2*time.Second, "how long each demo step and the NLM simulator take")
	fs.DurationVar(&o.drain, "drain", 15*time.Second, "how long SIGINT/SIGTERM may take to drain before the process exits anyway")
	fs.DurationVar(&o.poll, "poll", 250*time.Millisecond, "how often the event stream looks for changes")
	fs.DurationVar(&o.streamWrite, "stream-write-timeout", 30*time.Second, "how long a write to an event stream client may wait; a client that leaves more unread than its connection buffers (about 100 KB) is disconnected after it")
	fs.DurationVar(&o.idlePoll, "idle-poll", defaultIdlePoll, "the longest wait of the runner, the job worker and the NLM processor between looks for work other processes submitted (the event feed, on a store that cannot watch, waits up to twice it between listings of the audit log): they look every 25 ms while such work arrives and back off to this when none does, so it bounds the first pickup after idleness and sets an idle process's store requests (docs/performance.md)")
	fs.DurationVar(&o.lease, "lease", 5*time.Minute, "how long a run's lease lasts unheard: a killed runner's runs are taken over after it (heartbeats every third)")
	fs.StringVar(&o.callbackURL, "callback-url", "", "where the NLM simulator posts its callbacks (default: this process's API, or http://127.0.0.1:8080/nlm/callback for -role runner)")
	fs.StringVar(&o.config, "config", "", "JSON file of schedules (see config.go)")
	fs.IntVar(&o.limits.MaxConnsPerAddr, "max-conns-per-addr", 128, "connections one client IP address may hold open; more are closed at once (behind a proxy: its pool; -1: no bound)")
	fs.DurationVar(&o.retention.Age, "retention", 0, "delete finished history (runs, audit days, COMPLETE jobs, expired inbox entries; idempotency records once expired) this long after it finished, e.g. 168h; 0: keep everything")
	fs.Func("retention-ages", "per-kind overrides of -retention, `kind=age,...` (kinds: runs audit jobs dead_jobs idempotency inbox artifacts stats_hours stats_days proposals; age a duration or \"forever\"); dead_jobs and artifacts are kept unless named", o.retention.SetAges)
	fs.DurationVar(&o.retention.Interval, "retention-interval", retention.DefaultInterval, "how often a retention pass is due, across every process sharing the store")
	fs.BoolVar(&o.printS3, "print-s3-lifecycle", false, "print the S3 bucket lifecycle configuration for -retention and -retention-ages, and exit")
	fs.BoolVar(&o.rollingUpgrade, "rolling-upgrade", false, "while Workers of the previous release share the store: write only jobs they can read (the user's job types on the spec's machine, no priorities); drop it once every Worker runs this release (CHANGELOG)")
	fs.BoolVar(&o.allowUnsafeStore, "allow-unsafe-store", false, "start even on a store that fails the start-up semantics check (a create-only write over an existing key accepted, a stale If-Match accepted, ...): the failed checks are logged, and exactly-once no longer holds (docs/stores.md)")
	fs.IntVar(&o.runConc, "run-concurrency", 1, "runs of each agent that may execute at once, across every process sharing the store, for an agent that sets none of its own (run.Config.Concurrency; a run beyond it waits queued for a slot, its wait not counted in its run timeout)")
	fs.IntVar(&o.demoConc, "demo-concurrency", 4, "runs of each demo agent that may execute at once, across every process sharing the store")
	fs.BoolVar(&o.noDemo, "no-demo", false, "register no demo agents (then the Worker has none: for tests of the surface only)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch o.role {
	case roleAll, roleAPI, roleRunner:
	default:
		return o, fmt.Errorf("-role %q: want all, api or runner", o.role)
	}
	if o.role == roleAPI && o.addr == "" {
		return o, fmt.Errorf("-role api needs -addr")
	}
	if o.retention.Age < 0 {
		return o, fmt.Errorf("-retention %s is negative (0 keeps everything)", o.retention.Age)
	}
	if o.runConc < 1 {
		return o, fmt.Errorf("-run-concurrency %d: want at least 1", o.runConc)
	}
	if o.demoConc < 1 {
		return o, fmt.Errorf("-demo-concurrency %d: want at least 1", o.demoConc)
	}
	if o.pause <= 0 || o.drain <= 0 || o.poll <= 0 || o.idlePoll <= 0 || o.streamWrite <= 0 || o.lease < time.Second {
		return o, fmt.Errorf("-step-pause, -drain, -poll, -idle-poll and -stream-write-timeout must be positive, -lease at least 1s")
	}
	if o.callbackURL == "" && (o.role == roleRunner || o.addr == "") {
		o.callbackURL = "http://127.0.0.1:8080/nlm/callback" // a runner posts to the API process
	}
	return o, nil
}
