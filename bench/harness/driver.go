// Package harness runs the same no-op job workload through this SDK and
// through its peers (River on Postgres, asynq on Redis), one thin Driver per
// system, so their numbers come from one run on one machine (issue 12).
//
// It lives in its own module (bench/go.mod) so that River, asynq and pgx
// never enter the SDK's go.mod; the replace directive there points the SDK
// at this work tree, so the harness always measures the code beside it.
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Payload is what every job carries: which agent (queue key) it belongs to,
// its sequence number, and the wall-clock time its enqueue began, so the
// process that runs it can measure enqueue→start even when another process
// enqueued it (both read the same machine's clock).
type Payload struct {
	Agent      int   `json:"agent"`
	Seq        int   `json:"seq"`
	EnqueuedAt int64 `json:"t"` // unix nanoseconds
}

// Hooks are how a driver reports progress to the harness. Both must be
// safe for concurrent use and fast: they run on the systems' worker paths.
type Hooks struct {
	// Started is called when a job's handler begins, with its payload.
	Started func(Payload)
	// Done is called once the system has recorded the job as finished
	// (for the SDK: COMPLETE written; River: the completer's event; asynq:
	// the handler returned, its completion being the next Redis call).
	Done func()
}

// Counters are a system's cumulative costs, read before and after a
// measurement; the harness reports their deltas per job. A value below 0
// means the system does not expose it.
type Counters struct {
	// Writes are the durable writes: store Puts and Deletes for the SDK,
	// WAL flushes (pg_stat_wal.wal_sync) for Postgres, write commands
	// (every command but known read-only ones) for Redis.
	Writes int64
	// Reads are store Gets for the SDK; Redis read-only commands.
	Reads int64
	// Lists are store Lists for the SDK.
	Lists int64
	// Extra are further system-specific counts (Postgres commits, rows
	// written and WAL bytes; Redis commands in all), by name.
	Extra map[string]int64
}

func (c Counters) sub(o Counters) Counters {
	d := Counters{Writes: c.Writes - o.Writes, Reads: c.Reads - o.Reads, Lists: c.Lists - o.Lists, Extra: map[string]int64{}}
	if c.Writes < 0 {
		d.Writes = -1
	}
	if c.Reads < 0 {
		d.Reads = -1
	}
	if c.Lists < 0 {
		d.Lists = -1
	}
	for k, v := range c.Extra {
		d.Extra[k] = v - o.Extra[k]
	}
	return d
}

// Driver is one system under test. The harness calls Reset before each
// measurement, then Work, then Enqueue (here, or in a separate process
// through Open(Name(), Addr())), reads Counters around it, and stops the
// workers by cancelling Work's context.
type Driver interface {
	// Name is the system's name in the tables and for Open.
	Name() string
	// Reset empties the queue so every measurement starts from the same
	// state (and from an empty history, which the SDK's costs depend on).
	Reset(ctx context.Context) error
	// Work starts slots concurrent job slots that run no-op handlers
	// calling h. It returns at once; the slots run until ctx ends, and
	// stop waits for them.
	Work(ctx context.Context, slots int, h Hooks) (stop func() error, err error)
	// Enqueue adds one job to the queue, durably (it returns once the
	// system acknowledged the job).
	Enqueue(ctx context.Context, p Payload) error
	// Counters reads the system's cumulative costs.
	Counters(ctx context.Context) (Counters, error)
	// ServerCPU reads the user+system CPU time the system's server has
	// used so far, outside this process (Postgres: the postmaster and all
	// its processes; Redis: INFO cpu; MinIO: its process); 0 for a system
	// with no server (memstore, filestore run in this process).
	ServerCPU(ctx context.Context) (time.Duration, error)
	// WritesUnit says what Counters.Writes counts, for the tables.
	WritesUnit() string
	// Addr is what another process passes to Open, with Name, to enqueue
	// into the same queue; "" when no other process can (memstore).
	Addr() string
	// Close releases the driver's connections.
	Close() error
}

// Batcher is a driver with a batch insert: one call inserts several jobs,
// as the system's own batch API does (River's InsertMany or
// InsertManyFast, the SDK's Queue.InsertMany). asynq has none: its
// Client enqueues one task a call, and its public API offers no pipeline.
type Batcher interface {
	// EnqueueMany adds the jobs with one call of the system's batch
	// insert, durably.
	EnqueueMany(ctx context.Context, ps []Payload) error
	// BatchCall names that call, for the tables.
	BatchCall() string
}

// Open returns an enqueue-side driver for a system another process set up:
// name and addr are that driver's Name and Addr.
func Open(ctx context.Context, name, addr string) (Driver, error) {
	switch name {
	case NameFilestore:
		return openFilestore(addr)
	case NameSQLite:
		return openSQLite(ctx, addr)
	case NameMinIO:
		return openMinIO(ctx, addr)
	case NameRiver, NameRiverTuned:
		return OpenRiver(ctx, name, addr)
	case NameAsynq:
		return OpenAsynq(ctx, addr)
	}
	return nil, fmt.Errorf("harness: no driver %q reachable from another process", name)
}

// The systems' names.
const (
	NameMemstore   = "sdk-memstore"
	NameFilestore  = "sdk-filestore"
	NameSQLite     = "sdk-sqlite"
	NameMinIO      = "sdk-minio"
	NameRiver      = "river"
	NameRiverTuned = "river-tuned"
	NameAsynq      = "asynq"
)

func marshal(p Payload) []byte {
	b, _ := json.Marshal(p) // a struct of ints cannot fail
	return b
}

func now() int64 { return time.Now().UnixNano() }
