package run

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// executor starts executions and gives them what they use: the settings
// of a run's steps and writes, the store, the slots and the run's end.
type executor struct {
	cfg      execConfig
	store    *storage.Store
	now      func() time.Time
	log      *slog.Logger
	tracer   tracing.Tracer
	units    *core.Units
	absent   *core.Absence
	cat      *catalog
	slots    *slots
	ender    *ender
	statuses *statuses
	execs    *executions
	life     *lifetime
	// readSteps reads a run's step files (the reads' own).
	readSteps func(ctx context.Context, slug, runID string) ([]StepRecord, error)
}

// execConfig is what of Config an execution reads: its clock, the
// timeouts and retries of its steps, its heartbeat, the lease owner that
// fences its writes, and where it reports.
type execConfig struct {
	Clock             clock.Clock
	Owner             string
	RunTimeout        time.Duration
	FinishGrace       time.Duration
	HeartbeatInterval time.Duration
	StepTimeout       time.Duration
	StepRetries       int
	RetryBackoff      time.Duration
	ExternalTimeout   time.Duration
	Metrics           Metrics
}

// prepare makes the execution of c in the slot taken at slotVer; it runs
// once claimed (start).
func (xr *executor) prepare(c candidate, slot string, slotVer storage.Version) *execution {
	return &execution{e: xr, agent: xr.cat.agents[c.slug], w: c.w, records: map[int]StepRecord{}, markers: map[int]storage.Version{},
		input: c.input, inputKnown: c.inputKnown, slotKey: slot, slotVer: slotVer}
}

// start runs a claimed execution beside the loop, for as long as Run's
// context lives.
func (xr *executor) start(x *execution) {
	xr.life.add()
	go x.run(activity.Start(xr.life.context(), xr.cfg.Clock))
}

// mayHaveInput tells whether doc's run may have an input.json: false only
// when its active entry, written once by its submit before anything else,
// says it has none. Such a run need not wait for evidence that its input
// is missing.
func (xr *executor) mayHaveInput(ctx context.Context, doc Status) bool {
	key, err := layout.RunActiveKey(doc.AgentSlug, doc.RunID)
	if err != nil {
		return true
	}
	raw, _, err := xr.store.Get(ctx, key)
	if err != nil {
		return true
	}
	var e activeEntry
	if json.Unmarshal(raw, &e) != nil || e.Pending == nil || e.Pending.RunID != doc.RunID {
		return true // written before entries carried the pending status: unknown
	}
	return e.Input
}
