package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River's defaults are compared as they ship (FetchCooldown 100 ms,
// FetchPollInterval 1 s, LISTEN/NOTIFY wake-ups, synchronous_commit on), and
// "tuned" with the fetch settings the issue names, which bound its
// dispatch latency from below. The defaults also bound its throughput: a
// producer fetches at most once per FetchCooldown and at most as many jobs
// as it has free slots (MaxWorkers, here W), so W jobs per 100 ms: 10, 40
// and 160 jobs/s at W = 1, 4 and 16 (1,000 at the 100 slots of earlier
// runs). Tuned, the bound is W per 2 ms, above what the machine reaches.
const (
	riverTunedCooldown = 2 * time.Millisecond
	riverTunedPoll     = 20 * time.Millisecond
	// riverPoolConns is the pool's most connections (opened as needed):
	// enough for 32 concurrent enqueuers plus the worker client's fetches
	// and completer, so the pool, not River, is never what a run waits
	// for. scripts/bench.sh raises Postgres's max_connections to match
	// (the enqueuing process of a latency run has a pool of its own).
	riverPoolConns = 48
)

// riverArgs is the no-op job: its payload and River's kind.
type riverArgs struct {
	P Payload `json:"p"`
}

func (riverArgs) Kind() string { return "bench_noop" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	h Hooks
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	w.h.Started(job.Args.P)
	return nil
}

type riverDriver struct {
	name   string
	dsn    string
	pgData string // the server's data directory, for ServerCPU
	fast   bool   // EnqueueMany by InsertManyFast
	pool   *pgxpool.Pool
	insert *river.Client[pgx.Tx] // insert-only: no queues, never started
}

// RiverConfig says which River and where.
type RiverConfig struct {
	// Name is NameRiver (River's defaults) or NameRiverTuned (its fetch
	// tuned: FetchCooldown 2 ms, FetchPollInterval 20 ms).
	Name string
	// DSN is the Postgres database.
	DSN string
	// PGData is that server's data directory, where ServerCPU finds the
	// postmaster's pid; with "" the server's CPU is unknown.
	PGData string
	// InsertManyFast makes the batch insert (EnqueueMany) River's
	// InsertManyFast (COPY FROM, no rows returned) rather than InsertMany
	// (one INSERT of all the rows, returning them, as the SDK's
	// InsertMany returns its jobs). Both are one transaction, one commit.
	InsertManyFast bool
}

// NewRiver connects to the Postgres database of cfg, applies River's
// migrations, and returns the driver.
func NewRiver(ctx context.Context, cfg RiverConfig) (Driver, error) {
	d, err := OpenRiver(ctx, cfg.Name, cfg.DSN)
	if err != nil {
		return nil, err
	}
	d.(*riverDriver).pgData = cfg.PGData
	d.(*riverDriver).fast = cfg.InsertManyFast
	m, err := rivermigrate.New(riverpgxv5.New(d.(*riverDriver).pool), nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	return d, nil
}

// OpenRiver connects without migrating: for an enqueuing process.
func OpenRiver(ctx context.Context, name, dsn string) (Driver, error) {
	if name != NameRiver && name != NameRiverTuned {
		return nil, fmt.Errorf("harness: %q is not a River driver", name)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = riverPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	insert, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &riverDriver{name: name, dsn: dsn, pool: pool, insert: insert}, nil
}

func (d *riverDriver) Name() string       { return d.name }
func (d *riverDriver) Addr() string       { return d.dsn }
func (d *riverDriver) WritesUnit() string { return "WAL fsyncs" }
func (d *riverDriver) Close() error       { d.pool.Close(); return nil }

// ServerCPU is the CPU time of the postmaster and every process under it
// (backends, WAL writer, checkpointer, autovacuum, and those that exited).
func (d *riverDriver) ServerCPU(context.Context) (time.Duration, error) {
	pid, err := postmasterPID(d.pgData)
	if err != nil {
		return 0, err
	}
	return procTreeCPU(pid)
}

// Quiet writes Postgres's dirty buffers now (CHECKPOINT), so its
// checkpointer does not write them during the next measurement.
func (d *riverDriver) Quiet(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, "CHECKPOINT")
	return err
}

func (d *riverDriver) Reset(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

func (d *riverDriver) Work(ctx context.Context, slots int, h Hooks) (func() error, error) {
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &riverWorker{h: h}); err != nil {
		return nil, err
	}
	cfg := &river.Config{Logger: logger, Workers: workers,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: slots}}}
	if d.name == NameRiverTuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = riverTunedCooldown, riverTunedPoll
	}
	client, err := river.NewClient(riverpgxv5.New(d.pool), cfg)
	if err != nil {
		return nil, err
	}
	// A job is done for River once its completer has written it completed;
	// the event comes after that write. The channel holds a whole run so
	// no event is dropped.
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 1 << 20})
	fwd := make(chan struct{})
	go func() {
		defer close(fwd)
		for ev := range events {
			if ev.Kind == river.EventKindJobCompleted {
				h.Done()
			}
		}
	}()
	if err := client.Start(ctx); err != nil {
		cancelSub()
		return nil, err
	}
	return func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := client.Stop(sctx)
		cancelSub()
		<-fwd
		return err
	}, nil
}

// Enqueue is River's Client.Insert: one job, one transaction.
func (d *riverDriver) Enqueue(ctx context.Context, p Payload) error {
	_, err := d.insert.Insert(ctx, riverArgs{P: p}, nil)
	return err
}

// EnqueueMany is River's Client.InsertMany (or InsertManyFast): the jobs
// in one transaction.
func (d *riverDriver) EnqueueMany(ctx context.Context, ps []Payload) error {
	params := make([]river.InsertManyParams, len(ps))
	for i, p := range ps {
		params[i] = river.InsertManyParams{Args: riverArgs{P: p}}
	}
	var err error
	if d.fast {
		_, err = d.insert.InsertManyFast(ctx, params)
	} else {
		_, err = d.insert.InsertMany(ctx, params)
	}
	return err
}

func (d *riverDriver) BatchCall() string {
	if d.fast {
		return "InsertManyFast"
	}
	return "InsertMany"
}

// Counters reads Postgres's own statistics. A backend publishes its counts
// only now and then (at most once a second while busy), so the pool's
// connections are closed first: a backend that exits publishes at once,
// and the numbers are complete. The reading connection is a new one,
// closed after, whose own transaction or two per measurement are noise.
func (d *riverDriver) Counters(ctx context.Context) (Counters, error) {
	d.pool.Reset()
	time.Sleep(200 * time.Millisecond)
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		return Counters{}, err
	}
	defer conn.Close(ctx)
	var commits, rows, syncs, walBytes int64
	err = conn.QueryRow(ctx, `SELECT d.xact_commit, d.tup_inserted + d.tup_updated + d.tup_deleted,
		w.wal_sync, w.wal_bytes::bigint
		FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()`).Scan(&commits, &rows, &syncs, &walBytes)
	if err != nil {
		return Counters{}, errors.Join(errors.New("reading pg_stat_database/pg_stat_wal"), err)
	}
	return Counters{Writes: syncs, Reads: -1, Lists: -1,
		Extra: map[string]int64{"commits": commits, "rows_written": rows, "wal_bytes": walBytes}}, nil
}
