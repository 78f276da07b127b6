package run

import (
	"context"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/core"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
)

// poison moves poison records to quarantine (core.Quarantiner), counts
// them and logs each.
type poison struct {
	quar    *core.Quarantiner
	metrics Metrics
}

// count is how many records were moved to quarantine.
func (p *poison) count() int64 { return p.quar.Count() }

// quarantine moves one poison record under the quarantine prefix, counts
// it and logs record_quarantined at WARN. A record that changed since it
// was read (someone repaired it) is left alone: the error matches
// storage.ErrPreconditionFailed and the caller reads it again later.
func (p *poison) quarantine(ctx context.Context, ce *lifecycle.QuarantinedError) (string, error) {
	qkey, err := p.quar.Move(ctx, ce)
	if err != nil {
		return qkey, err
	}
	if m, ok := p.metrics.(quarantineMetrics); ok {
		m.RecordQuarantined(quarantineKind(ce.Key))
	}
	return qkey, nil
}

func isRunStatusKey(key string) bool {
	_, _, ok := layout.ParseRunStatusKey(key)
	return ok
}

func quarantineKind(key string) string {
	switch {
	case isRunStatusKey(key):
		return "run_status"
	case layout.IsRunSlotKey(key):
		return "slot"
	case strings.HasPrefix(key, layout.RunIndexPrefix):
		return "run_index"
	}
	return "other"
}

// quarantineMetrics is a Metrics that also counts poison records the
// Runner quarantined (see Metrics).
type quarantineMetrics interface {
	RecordQuarantined(kind string)
}

// stepMetrics is a Metrics that also observes step durations (see Metrics).
type stepMetrics interface {
	StepFinished(agent, step, status string, d time.Duration)
}

// stragglerMetrics is a Metrics that also counts abandoned step attempts
// (see Metrics).
type stragglerMetrics interface {
	StepAbandoned(agent, step string)
}
