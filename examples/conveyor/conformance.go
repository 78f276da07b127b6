package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

const conformanceUsage = `usage: conveyor conformance (-dir DIR | -s3-bucket B [-s3-endpoint URL] [-s3-prefix P/]) [flags]

Runs the store conformance suite, its concurrency checks included, against
a store that already runs: each check in a fresh folder (a key prefix of
the bucket, a directory under DIR) that it removes when it ends. Prints
each check's verdict; exits 0 when all passed, 1 when one failed.
Credentials and region come from the standard AWS variables.

`

// conformanceOptions are the conformance command's flags.
type conformanceOptions struct {
	dir                            string
	s3Bucket, s3Endpoint, s3Prefix string
	atomicDelete                   bool
	run                            string
	timeout                        time.Duration
	parallel                       int
	verbose                        bool
}

func parseConformance(args []string, stderr io.Writer) (conformanceOptions, error) {
	var o conformanceOptions
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, conformanceUsage); fs.PrintDefaults() }
	fs.StringVar(&o.dir, "dir", "", "a directory store: the checks run in folders under DIR")
	fs.StringVar(&o.s3Bucket, "s3-bucket", "", "an S3 bucket: the checks run under key prefixes of it")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 API URL, e.g. http://127.0.0.1:9000 (default AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL); path-style")
	fs.StringVar(&o.s3Prefix, "s3-prefix", "", "key prefix in the bucket under which the checks' prefixes go, ending in /")
	fs.BoolVar(&o.atomicDelete, "atomic-delete", false, "S3 only: the server honours If-Match on DeleteObject atomically (AWS S3 documents it; MinIO does not), so check it under concurrency too")
	fs.StringVar(&o.run, "run", "", "run only the checks matching this regular expression (e.g. 'PutConditions|CASCounterRace')")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "fail if the suite takes longer")
	fs.IntVar(&o.parallel, "parallel", 4, "checks run at once")
	fs.BoolVar(&o.verbose, "v", false, "print each check as it runs and what it logs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case (o.dir == "") == (o.s3Bucket == ""):
		return o, errors.New("name one store: -dir or -s3-bucket")
	case o.parallel < 1:
		return o, errors.New("-parallel must be at least 1")
	}
	if o.run != "" {
		if _, err := regexp.Compile(o.run); err != nil {
			return o, fmt.Errorf("-run: %w", err)
		}
	}
	return o, nil
}

// conformance is the conformance command. The suite's checks take a
// *testing.T, so it runs them with the testing package's own runner
// (testing.Main, which the Go 1 compatibility promise covers): their
// parallelism, timeouts, failure reports and cleanup are those of go test.
// testing.Main ends the process with the suite's verdict, so conformance
// returns only when it does not start (2 for a usage error, 1 for a store
// it cannot open).
func conformance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseConformance(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "conveyor conformance: %v\n", err)
		return 2
	}
	h, where, done, err := conformanceHarness(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "conveyor conformance: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "conformance suite on %s, %d checks\n", where, len(storetest.Checks()))
	testing.Init()
	testArgs := []string{"-test.timeout", o.timeout.String(), "-test.parallel", fmt.Sprint(o.parallel)}
	if o.run != "" {
		testArgs = append(testArgs, "-test.run", "^Conformance$/("+o.run+")")
	}
	if o.verbose {
		testArgs = append(testArgs, "-test.v")
	}
	if err := flag.CommandLine.Parse(testArgs); err != nil {
		fmt.Fprintf(stderr, "conveyor conformance: %v\n", err)
		return 2
	}
	rec := &recorder{Harness: h, out: stdout}
	testing.Main(matchString, []testing.InternalTest{{Name: "Conformance", F: func(t *testing.T) {
		t.Cleanup(func() { done(); rec.summary() })
		storetest.Run(t, rec)
	}}}, nil, nil)
	return 1 // not reached: testing.Main exits
}

// matchString is -test.run's matcher.
func matchString(pat, s string) (bool, error) { return regexp.MatchString(pat, s) }

// conformanceHarness opens the store o names and returns the harness that
// gives each check its own folder of it, a description of the store, and
// what removes the run's own folder once every check has ended.
func conformanceHarness(ctx context.Context, o conformanceOptions) (storetest.Harness, string, func(), error) {
	run := "conformance-" + randomHex(4) + "/"
	if o.dir != "" {
		root := filepath.Join(o.dir, run)
		done := func() { _ = os.Remove(root) } // empty by then, unless a check's removal failed
		return namespaces{
			Open: func(_ context.Context, ns string) (driver.Store, error) {
				return filestore.NewDriver(filepath.Join(root, ns))
			},
			Remove: func(ctx context.Context, ns string, s *storage.Store) error {
				err := emptyStore(ctx, s)
				_ = s.Close()
				return errors.Join(err, os.RemoveAll(filepath.Join(root, ns)))
			},
		}, "the directory " + o.dir, done, nil
	}
	cfg, err := storeopen.S3{Bucket: o.s3Bucket, Prefix: o.s3Prefix, Endpoint: o.s3Endpoint}.Config()
	if err != nil {
		return nil, "", nil, err
	}
	base, err := s3store.NewDriver(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := base.Check(checkCtx); err != nil {
		return nil, "", nil, err
	}
	where := "s3 bucket " + cfg.Bucket
	if cfg.Endpoint != "" {
		where += " at " + cfg.Endpoint
	}
	return namespaces{
		Open: func(_ context.Context, ns string) (driver.Store, error) {
			s, err := s3store.NewWithClient(base.Client(), cfg.Bucket, cfg.Prefix+run+ns)
			if err != nil {
				return nil, err
			}
			return s.Unwrap(), nil
		},
		// ETags are MD5s of the body; a conditional Delete is a HEAD, then
		// a DELETE, atomic only where the server honours If-Match on it.
		Caps: storetest.Capabilities{ContentVersions: true, NonAtomicConditionalDelete: !o.atomicDelete},
	}, where + ", under " + cfg.Prefix + run, func() {}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// recorder is the harness that notes each check's verdict, for the
// summary the command prints once every check has ended.
type recorder struct {
	storetest.Harness
	out io.Writer

	mu       sync.Mutex
	verdicts []verdict
}

type verdict struct {
	check  string
	result string // PASS, FAIL or SKIP
	took   time.Duration
}

// NewDriver notes the check's verdict when it ends.
func (r *recorder) NewDriver(t *testing.T) driver.Store {
	start := time.Now()
	t.Cleanup(func() {
		v := verdict{check: strings.TrimPrefix(t.Name(), "Conformance/"), result: "PASS", took: time.Since(start)}
		switch {
		case t.Failed():
			v.result = "FAIL"
		case t.Skipped():
			v.result = "SKIP"
		}
		r.mu.Lock()
		r.verdicts = append(r.verdicts, v)
		r.mu.Unlock()
	})
	return r.Harness.NewDriver(t)
}

// summary prints every check's verdict in the suite's order, then the
// counts; the failures' messages follow it, as go test prints them.
func (r *recorder) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	count := map[string]int{}
	for _, name := range storetest.Checks() {
		for _, v := range r.verdicts {
			if v.check == name {
				fmt.Fprintf(r.out, "  %s  %-30s %6.2fs\n", v.result, v.check, v.took.Seconds())
				count[v.result]++
			}
		}
	}
	fmt.Fprintf(r.out, "%d checks: %d passed, %d failed, %d skipped\n",
		len(r.verdicts), count["PASS"], count["FAIL"], count["SKIP"])
}
