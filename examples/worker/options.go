package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/s3store"
)

// options are the command line.
type options struct {
	addr     string
	data     string
	role     string
	owner    string
	tokens   string
	logLevel slog.Level

	s3Bucket, s3Endpoint, s3Prefix string

	pause       time.Duration
	drain       time.Duration
	poll        time.Duration
	lease       time.Duration
	callbackURL string
	noDemo      bool
	config      string
	// limits are the HTTP server's (httpapi.Limits); the flag sets
	// MaxConnsPerAddr, the others keep their defaults.
	limits httpapi.Limits
}

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
	fs.StringVar(&o.role, "role", roleAll, "all: HTTP and execution; api: HTTP only (reads the store, submits); runner: executes runs and jobs")
	fs.StringVar(&o.owner, "owner", "", "this process's name in leases: distinct per process sharing a store (default: host and executable name, stable across restarts)")
	fs.StringVar(&o.tokens, "tokens", "", "file of bearer tokens, `token actor` per line (also CONVEYOR_TOKENS=tok=actor,...); none: loopback only")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "DEBUG shows every state change")
	fs.StringVar(&o.s3Bucket, "s3-bucket", os.Getenv(s3store.EnvBucket), "S3/MinIO bucket instead of -data (env "+s3store.EnvBucket+")")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 API URL, e.g. http://127.0.0.1:9000 for MinIO (default AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)")
	fs.StringVar(&o.s3Prefix, "s3-prefix", os.Getenv("CONVEYOR_S3_PREFIX"), "key prefix in the bucket, ending in /")
	fs.DurationVar(&o.pause, "step-pause", 2*time.Second, "how long each demo step and the NLM simulator take")
	fs.DurationVar(&o.drain, "drain", 15*time.Second, "how long SIGINT/SIGTERM may take to drain before the process exits anyway")
	fs.DurationVar(&o.poll, "poll", 250*time.Millisecond, "how often runners look for work other processes submitted, and the event stream for changes")
	fs.DurationVar(&o.lease, "lease", 5*time.Minute, "how long a run's lease lasts unheard: a killed runner's runs are taken over after it (heartbeats every third)")
	fs.StringVar(&o.callbackURL, "callback-url", "", "where the NLM simulator posts its callbacks (default: this process's API, or http://127.0.0.1:8080/nlm/callback for -role runner)")
	fs.StringVar(&o.config, "config", "", "JSON file of schedules (see config.go)")
	fs.IntVar(&o.limits.MaxConnsPerAddr, "max-conns-per-addr", httpapi.DefaultMaxConnsPerAddr, "connections one client IP address may hold open; more are closed at once (behind a proxy: its pool; -1: no bound)")
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
	if o.pause <= 0 || o.drain <= 0 || o.poll <= 0 || o.lease < time.Second {
		return o, fmt.Errorf("-step-pause, -drain and -poll must be positive, -lease at least 1s")
	}
	if o.callbackURL == "" && (o.role == roleRunner || o.addr == "") {
		o.callbackURL = "http://127.0.0.1:8080/nlm/callback" // a runner posts to the API process
	}
	return o, nil
}
