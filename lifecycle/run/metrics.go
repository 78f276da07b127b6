package run

import (
	"time"
)

// Metrics receives the run metrics of docs/spec.md#metrics. Implementations must be
// safe for concurrent use and fast: they are called on the write path.
//
// A Metrics may also have any of these methods, which the
// Runner then calls:
//
//	// RecordQuarantined counts a poison record the Runner quarantined,
//	// by kind ("run_status", "slot").
//	RecordQuarantined(kind string)
//	// StepAbandoned counts a step attempt abandoned at a deadline while
//	// its goroutine ran on.
//	StepAbandoned(agent, step string)
//	// StepFinished observes a step's duration once its step file is
//	// written with the step's end, status "completed" or "failed" (the p95
//	// step times of docs/spec.md#metrics).
//	StepFinished(agent, step, status string, d time.Duration)
//	// RunTransitionOf and RunFinishedOf are RunTransition and
//	// RunFinished of a run of another tenant than the default one
//	// (docs/spec.md#tenants), called instead of them for such a run.
//	RunTransitionOf(tenant, agent, machine, from, to string)
//	RunFinishedOf(tenant, agent, status string, d time.Duration)
//
// The gauge of active runs (gwi_run_active_gauge) is no call here: it is
// read from the store (Runner.ActiveRuns), since counts moved by one
// process's writes go wrong (negative) once a process restarts with runs in
// flight.
type Metrics interface {
	// RunTransition counts a status write from → to of a run of agent
	// (gwi_run_transitions_total, and conveyor_run_transitions_total by
	// agent).
	RunTransition(agent, machine, from, to string)
	// RunFinished observes a run's duration by outcome (gwi_run_duration_seconds).
	RunFinished(agent, status string, d time.Duration)
	// Idempotency counts a lookup of an idempotency key as a hit or a miss
	// (gwi_idempotency_hits_total).
	Idempotency(source string, hit bool)
}

type noMetrics struct{}

func (noMetrics) RunTransition(string, string, string, string) {}
func (noMetrics) RunFinished(string, string, time.Duration)    {}
func (noMetrics) Idempotency(string, bool)                     {}

// tenantMetrics is a Metrics that labels the run metrics by tenant.
type tenantMetrics interface {
	RunTransitionOf(tenant, agent, machine, from, to string)
	RunFinishedOf(tenant, agent, status string, d time.Duration)
}

// runTransition counts a status write on m, by tenant where m can (the
// default tenant's as before tenants, so a Metrics that wraps another
// sees its runs as it did).
func runTransition(m Metrics, tenant, agent, machine, from, to string) {
	if tm, ok := m.(tenantMetrics); ok && tenant != "" {
		tm.RunTransitionOf(tenant, agent, machine, from, to)
		return
	}
	m.RunTransition(agent, machine, from, to)
}
