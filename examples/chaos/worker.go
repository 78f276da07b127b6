package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// WorkerOptions configure one worker process. The parent passes them as
// flags; the S3 credentials go through the environment
// (CONVEYOR_CHAOS_S3_ACCESS, CONVEYOR_CHAOS_S3_SECRET), not the command line.
type WorkerOptions struct {
	ID         string
	Store, Dir string
	OutageFile string // filestore: while this file exists, every store call fails
	S3Endpoint string
	S3Bucket   string
	S3Prefix   string
	S3Region   string

	Lease, Step, Poll, Sweep time.Duration
	Work                     time.Duration // mean simulated work per handler call
	Slots                    int
	FailRate, HangRate       float64
	HangFor                  time.Duration // how long a hung handler call ignores its ctx
	Seed                     uint64
}

const (
	envS3Access = "CONVEYOR_CHAOS_S3_ACCESS"
	envS3Secret = "CONVEYOR_CHAOS_S3_SECRET"
)

func (w *WorkerOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&w.ID, "id", "", "worker: its id (unique per process)")
	fs.StringVar(&w.OutageFile, "outage-file", "", "worker: store calls fail while this file exists (filestore outage)")
	fs.StringVar(&w.S3Endpoint, "s3-endpoint", "", "worker: S3 endpoint")
	fs.StringVar(&w.S3Bucket, "s3-bucket", "", "worker: S3 bucket")
	fs.StringVar(&w.S3Prefix, "s3-prefix", "", "worker: key prefix in the bucket")
	fs.StringVar(&w.S3Region, "s3-region", "us-east-1", "worker: S3 region")
}

// args renders w as the flags Main parses.
func (w WorkerOptions) args() []string {
	a := []string{"-worker", "-id", w.ID, "-store", w.Store,
		"-lease", w.Lease.String(), "-step", w.Step.String(), "-poll", w.Poll.String(), "-sweep", w.Sweep.String(),
		"-work", w.Work.String(), "-slots", fmt.Sprint(w.Slots), "-fail-rate", fmt.Sprint(w.FailRate), "-hang-rate", fmt.Sprint(w.HangRate), "-hang-for", w.HangFor.String(),
		"-seed", fmt.Sprint(w.Seed)}
	if w.Dir != "" {
		a = append(a, "-dir", w.Dir)
	}
	if w.OutageFile != "" {
		a = append(a, "-outage-file", w.OutageFile)
	}
	if w.S3Endpoint != "" {
		a = append(a, "-s3-endpoint", w.S3Endpoint, "-s3-bucket", w.S3Bucket, "-s3-prefix", w.S3Prefix, "-s3-region", w.S3Region)
	}
	return a
}

// queueConfig is the jobqueue configuration every process of a run shares.
func queueConfig(s *storage.Store, node string, lease, step time.Duration, log *slog.Logger) jobqueue.Config {
	return jobqueue.Config{
		Store: s, Node: node, Logger: log,
		LeaseTTL: lease, StepTimeout: step,
		// The default 15 s, 30 s, 60 s, scaled down so a run takes seconds.
		Backoff: []time.Duration{lease / 10, lease / 5, lease / 2},
	}
}

// sqliteFile is the SQLite file's name in the run's directory (-store
// sqlite).
const sqliteFile = "store.db"

// openStore opens the run's store as a worker sees it.
func (w WorkerOptions) openStore() (*storage.Store, func(), error) {
	switch w.Store {
	case "file":
		s, err := filestore.New(w.Dir)
		if err != nil {
			return nil, nil, err
		}
		if w.OutageFile != "" {
			return storage.New(&outageStore{Store: s, marker: w.OutageFile}), func() {}, nil
		}
		return s, func() {}, nil
	case "sqlite":
		s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(w.Dir, sqliteFile)})
		if err != nil {
			return nil, nil, err
		}
		closeStore := func() { _ = s.Close() }
		if w.OutageFile != "" {
			return storage.New(&outageStore{Store: s, marker: w.OutageFile}), closeStore, nil
		}
		return s, closeStore, nil
	case "minio":
		srv := &miniotest.Server{Endpoint: w.S3Endpoint, AccessKey: os.Getenv(envS3Access),
			SecretKey: os.Getenv(envS3Secret), Region: w.S3Region}
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: tr, Timeout: 10 * time.Second}), w.S3Bucket, w.S3Prefix)
		if err != nil {
			return nil, nil, err
		}
		return s, tr.CloseIdleConnections, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q (want file, sqlite or minio)", w.Store)
}

// RunWorker is the body of a worker process: a jobqueue.Worker with
// simulated handlers on the run's store, until SIGTERM or its stdin closes
// (the parent is gone).
func RunWorker(w WorkerOptions, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, closeStore, err := w.openStore()
	if err != nil {
		log.Error("chaos worker: store", "err", err)
		return 2
	}
	defer closeStore()
	q, err := jobqueue.New(queueConfig(s, w.ID, w.Lease, w.Step, log))
	if err != nil {
		log.Error("chaos worker: queue", "err", err)
		return 2
	}
	// Stop on SIGTERM or when stdin closes (the parent is gone). The signal
	// stays caught for the process's life: a second SIGTERM must not kill a
	// worker that is slow to stop, or the parent could not tell.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		<-sigs
		stop()
	}()
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		stop()
	}()
	h := newHandlers(w, log)
	wk := &jobqueue.Worker{Queue: q, ID: w.ID, Handlers: h, Slots: max(w.Slots, 1), PollInterval: w.Poll, SweepInterval: w.Sweep}
	if err := wk.Run(ctx); err != nil {
		log.Error("chaos worker: run", "err", err)
		return 2
	}
	log.Warn("chaos worker: stopped", "worker", w.ID, "pid", os.Getpid())
	return 0
}

// newHandlers simulates the pipeline: a little work in each step, some 503
// answers, and (if asked) calls that ignore their ctx. The artifact says
// which process and attempt produced it, which is how the checker finds a
// late artifact write.
func newHandlers(w WorkerOptions, log *slog.Logger) jobqueue.Handlers {
	var mu sync.Mutex
	seed := w.Seed ^ uint64(os.Getpid())<<20
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	roll := func() (float64, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64(), time.Duration(float64(w.Work) * (0.25 + 1.5*rng.Float64()))
	}
	work := func(ctx context.Context, d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return nil
		}
	}
	return jobqueue.Handlers{
		AssembleContext: func(ctx context.Context, job lifecycle.Job) (json.RawMessage, error) {
			_, d := roll()
			if err := work(ctx, d); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"snapshot":true}`), nil
		},
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
			r, d := roll()
			switch {
			case r < w.HangRate:
				// User code that ignores its ctx (issue 10 item 1).
				log.Warn("chaos worker: handler ignoring ctx", "worker", w.ID, "job_id", job.JobID, "for", w.HangFor)
				time.Sleep(w.HangFor)
				return lifecycle.JobOutput{}, errors.New("chaos: hung handler returned late")
			case r < w.HangRate+w.FailRate:
				_ = work(ctx, d)
				return lifecycle.JobOutput{}, &jobqueue.StatusError{Code: http.StatusServiceUnavailable}
			}
			if err := work(ctx, d); err != nil {
				return lifecycle.JobOutput{}, err
			}
			var owner string
			var epoch int64
			if job.Lease != nil {
				owner, epoch = job.Lease.Owner, job.Lease.Epoch
			}
			body := producer{Owner: owner, Epoch: epoch, Attempt: job.Attempt, PID: os.Getpid()}.String()
			c, _ := json.Marshal(map[string]any{"title": "Brief " + job.JobID, "body": body, "entity_map": map[string]string{}, "word_count": 4})
			return lifecycle.JobOutput{Content: c}, nil
		},
	}
}

// producer is who produced an artifact's content: the body of every
// artifact of a chaos run.
type producer struct {
	Owner   string
	Epoch   int64
	Attempt int
	PID     int
}

func (p producer) String() string {
	return fmt.Sprintf("owner=%s epoch=%d attempt=%d pid=%d", p.Owner, p.Epoch, p.Attempt, p.PID)
}

func parseProducer(content json.RawMessage) (producer, bool) {
	var c struct {
		Body string `json:"body"`
	}
	var p producer
	if json.Unmarshal(content, &c) != nil {
		return p, false
	}
	n, _ := fmt.Sscanf(c.Body, "owner=%s epoch=%d attempt=%d pid=%d", &p.Owner, &p.Epoch, &p.Attempt, &p.PID)
	return p, n == 4
}

// outageStore is the filestore's outage, a driver over its Store: while the marker file exists,
// every call fails as a disk that answers EIO would, before touching the
// directory. All processes see the same marker, so the outage starts and
// ends for all of them at once, as a stopped MinIO does. (The parent's own
// checks use the store directly.) A directory made unwritable would not
// do: the processes run as whatever user, root ignores permissions, and
// reads would go on. It forwards Commit (refused whole while down) and
// Unwrap, so a store under it that commits still does, and one that does
// not still does not.
type outageStore struct {
	driver.Store
	marker string
}

func (o *outageStore) down(op, key string) error {
	if _, err := os.Stat(o.marker); err == nil {
		return &storage.OpError{Op: op, Key: key, Cause: &os.PathError{Op: op, Path: key, Err: syscall.EIO}}
	}
	return nil
}

func (o *outageStore) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if err := o.down("get", key); err != nil {
		return nil, "", err
	}
	return o.Store.Get(ctx, key)
}

func (o *outageStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if err := o.down("put", key); err != nil {
		return "", err
	}
	return o.Store.Put(ctx, key, value, cond)
}

func (o *outageStore) Delete(ctx context.Context, key string, cond storage.Condition) error {
	if err := o.down("delete", key); err != nil {
		return err
	}
	return o.Store.Delete(ctx, key, cond)
}

func (o *outageStore) Commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	c, ok := o.Store.(driver.Committer)
	if !ok {
		return nil, &storage.OpError{Op: "commit", Kind: errors.ErrUnsupported}
	}
	key := ""
	if len(writes) > 0 {
		key = writes[0].Key
	}
	if err := o.down("commit", key); err != nil {
		return nil, err
	}
	return c.Commit(ctx, writes)
}

func (o *outageStore) Unwrap() driver.Store { return o.Store }

func (o *outageStore) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := o.down("list", prefix); err != nil {
			yield("", err)
			return
		}
		for k, err := range o.Store.ListAfter(ctx, prefix, after) {
			if !yield(k, err) {
				return
			}
		}
	}
}
