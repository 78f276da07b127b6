package jobqueue

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/storage"
)

// Alert rules of seed 003 §5.4.
const (
	// RuleQueuedTooLong: a job has been QUEUED longer than AlertConfig.QueuedLimit.
	RuleQueuedTooLong = "job_queued_too_long"
	// RuleDeadRate: the dead job rate over AlertConfig.DeadRateWindow is
	// above AlertConfig.DeadRateLimit.
	RuleDeadRate = "dead_job_rate"
	// RuleArtifactWriteFailures: the last AlertConfig.Consecutive artifact
	// writes failed.
	RuleArtifactWriteFailures = "artifact_write_failures"
	// RuleContextAssemblyTimeouts: the last AlertConfig.Consecutive context
	// assemblies failed.
	RuleContextAssemblyTimeouts = "context_assembly_timeouts"
)

// Alert is one firing rule with the operator's action from the seed.
type Alert struct {
	Rule   string   `json:"rule"`
	Action string   `json:"action"`
	Detail string   `json:"detail"`
	JobIDs []string `json:"job_ids,omitempty"`
}

// AlertConfig holds the thresholds of seed 003 §5.3 and §5.4; the zero
// value means the seed's numbers.
type AlertConfig struct {
	// QueuedLimit: default 5 min.
	QueuedLimit time.Duration
	// DeadRateLimit: default 0.01 (1 %).
	DeadRateLimit float64
	// DeadRateWindow: default 7 days.
	DeadRateWindow time.Duration
	// CompletionWindow is the window of the completion rate and the P95
	// times: default 24 h.
	CompletionWindow time.Duration
	// Consecutive: default 3.
	Consecutive int
}

func (c *AlertConfig) defaults() {
	if c.QueuedLimit <= 0 {
		c.QueuedLimit = 5 * time.Minute
	}
	if c.DeadRateLimit <= 0 {
		c.DeadRateLimit = 0.01
	}
	if c.DeadRateWindow <= 0 {
		c.DeadRateWindow = 7 * 24 * time.Hour
	}
	if c.CompletionWindow <= 0 {
		c.CompletionWindow = 24 * time.Hour
	}
	if c.Consecutive <= 0 {
		c.Consecutive = 3
	}
}

// SLO is the job metrics of seed 003 §5.3, computed from the store. Rates
// are over jobs that finished (COMPLETE or DEAD) in the window by their
// updated_at; times are from the audit log's timestamps.
type SLO struct {
	Complete24h, Dead24h int
	// CompletionRate24h: COMPLETE / finished over CompletionWindow (SLO > 95 %);
	// 1 when nothing finished.
	CompletionRate24h  float64
	Complete7d, Dead7d int
	// DeadRate7d: DEAD / finished over DeadRateWindow (SLO < 1 %).
	DeadRate7d float64
	// P95EndToEnd: created → COMPLETE (SLO < 120 s).
	P95EndToEnd time.Duration
	// P95ContextAssembly: time in CONTEXT_ASSEMBLY (SLO < 5 s).
	P95ContextAssembly time.Duration
	// P95NLMCall: time in NOTEBOOKLM_CALL (SLO < 60 s).
	P95NLMCall time.Duration
	// P95ArtifactWrite: time in ARTIFACT_WRITE (SLO < 2 s).
	P95ArtifactWrite time.Duration
}

// Report is what Evaluate found.
type Report struct {
	SLO    SLO
	Alerts []Alert
}

// Evaluate computes the SLO metrics and the alerts of seed 003 §5.3-5.4 at
// now from what the store holds: the job records (QUEUED too long, rates)
// and the audit log of the CompletionWindow (streaks and step times). A
// context-assembly failure counts towards the timeout streak: the seed's
// table has the memory backend's timeout as the one way from
// CONTEXT_ASSEMBLY to RETRY_BACKOFF. It reads every job and a day or two
// of audit log, so run it on a schedule, not per request.
func (q *Queue) Evaluate(ctx context.Context, now time.Time, cfg AlertConfig) (Report, error) {
	cfg.defaults()
	var r Report
	var queued []string
	for d, err := range q.docs(ctx) {
		if err != nil {
			return r, err
		}
		switch d.Status {
		case JobQueued:
			if d.QueuedAt != nil && now.Sub(*d.QueuedAt) > cfg.QueuedLimit {
				queued = append(queued, d.JobID)
			}
		case JobComplete, JobDead:
			age := now.Sub(d.UpdatedAt)
			dead := d.Status == JobDead
			if age <= cfg.CompletionWindow {
				if dead {
					r.SLO.Dead24h++
				} else {
					r.SLO.Complete24h++
				}
			}
			if age <= cfg.DeadRateWindow {
				if dead {
					r.SLO.Dead7d++
				} else {
					r.SLO.Complete7d++
				}
			}
		}
	}
	r.SLO.CompletionRate24h = 1
	if n := r.SLO.Complete24h + r.SLO.Dead24h; n > 0 {
		r.SLO.CompletionRate24h = float64(r.SLO.Complete24h) / float64(n)
	}
	if n := r.SLO.Complete7d + r.SLO.Dead7d; n > 0 {
		r.SLO.DeadRate7d = float64(r.SLO.Dead7d) / float64(n)
	}
	if len(queued) > 0 {
		r.Alerts = append(r.Alerts, Alert{Rule: RuleQueuedTooLong, JobIDs: queued,
			Action: "operator checks NLM Backend health",
			Detail: fmt.Sprintf("%d job(s) QUEUED longer than %s", len(queued), cfg.QueuedLimit)})
	}
	if r.SLO.DeadRate7d > cfg.DeadRateLimit {
		r.Alerts = append(r.Alerts, Alert{Rule: RuleDeadRate,
			Action: "operator checks Orchestration Layer logs",
			Detail: fmt.Sprintf("dead job rate %.2f%% (%d of %d) over %s, limit %.2f%%", 100*r.SLO.DeadRate7d,
				r.SLO.Dead7d, r.SLO.Dead7d+r.SLO.Complete7d, cfg.DeadRateWindow, 100*cfg.DeadRateLimit)})
	}
	// The audit log of the window, in time order.
	var events []storage.AuditEvent
	from := now.Add(-cfg.CompletionWindow)
	for day := from.UTC().Truncate(24 * time.Hour); !day.After(now.UTC()); day = day.Add(24 * time.Hour) {
		for e, err := range storage.ReadAuditDay(ctx, q.store, day) {
			if err != nil {
				return r, err
			}
			if strings.HasPrefix(e.Event, "job.") && !e.TS.Before(from) && !e.TS.After(now) {
				events = append(events, e)
			}
		}
	}
	slices.SortFunc(events, func(a, b storage.AuditEvent) int { return strings.Compare(a.ID, b.ID) })
	streak := func(step JobState, ok JobState) []string {
		var jobs []string
		for _, e := range events {
			if JobState(e.From) != step {
				continue
			}
			switch JobState(e.To) {
			case JobRetryBackoff:
				jobs = append(jobs, e.JobID)
			case ok:
				jobs = nil
			}
		}
		return jobs
	}
	if jobs := streak(JobArtifactWrite, JobComplete); len(jobs) >= cfg.Consecutive {
		r.Alerts = append(r.Alerts, Alert{Rule: RuleArtifactWriteFailures, JobIDs: jobs,
			Action: "operator checks MinIO availability",
			Detail: fmt.Sprintf("the last %d artifact writes failed", len(jobs))})
	}
	if jobs := streak(JobContextAssembly, JobNotebookLMCall); len(jobs) >= cfg.Consecutive {
		r.Alerts = append(r.Alerts, Alert{Rule: RuleContextAssemblyTimeouts, JobIDs: jobs,
			Action: "operator checks Memory Backend / GitHub",
			Detail: fmt.Sprintf("the last %d context assemblies failed", len(jobs))})
	}
	// Step times: from entering a state to leaving it, per job.
	entered := map[string]time.Time{}
	created := map[string]time.Time{}
	var ca, nlm, aw, e2e []time.Duration
	for _, e := range events {
		from, to := JobState(e.From), JobState(e.To)
		if t, ok := entered[e.JobID+"/"+string(from)]; ok {
			d := e.TS.Sub(t)
			switch from {
			case JobContextAssembly:
				ca = append(ca, d)
			case JobNotebookLMCall:
				nlm = append(nlm, d)
			case JobArtifactWrite:
				aw = append(aw, d)
			}
		}
		entered[e.JobID+"/"+string(to)] = e.TS
		if from == "" {
			created[e.JobID] = e.TS
		}
		if to == JobComplete {
			if t, ok := created[e.JobID]; ok {
				e2e = append(e2e, e.TS.Sub(t))
			}
		}
	}
	r.SLO.P95ContextAssembly, r.SLO.P95NLMCall, r.SLO.P95ArtifactWrite, r.SLO.P95EndToEnd = p95(ca), p95(nlm), p95(aw), p95(e2e)
	return r, nil
}

// p95 is the nearest-rank 95th percentile; 0 for no samples.
func p95(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := (95*len(ds) + 99) / 100 // ceil(0.95 n)
	return ds[rank-1]
}
