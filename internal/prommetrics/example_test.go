package prommetrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runconveyor/conveyor/adapters/memstore"
	promadapter "github.com/runconveyor/conveyor/internal/prommetrics"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// One *Metrics serves a Queue (jobqueue.Config.Metrics) and a Runner
// (run.Config.Metrics) alike; WatchQueue adds the queue's depth and age,
// read at every scrape. Serve reg with promhttp.HandlerFor.
func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := promadapter.New(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	clk := clock.NewFake(time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC))
	q, _ := jobqueue.New(jobqueue.Config{Store: memstore.New(), Clock: clk, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err := m.WatchQueue(q); err != nil {
		fmt.Println(err)
		return
	}

	for _, id := range []string{"job-1", "job-2"} {
		_, _ = q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent-a"})
	}
	clk.Advance(2 * time.Minute)
	c, _ := q.Claim(ctx, "worker-1") // job-1
	_, _ = c.Run(ctx, jobqueue.Handlers{CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
	}})

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if !slices.Contains([]string{"conveyor_queue_depth", "conveyor_queue_oldest_ready_age_seconds", "conveyor_job_duration_seconds"}, mf.GetName()) {
			continue
		}
		for _, s := range mf.GetMetric() {
			labels := ""
			for _, l := range s.GetLabel() {
				labels += fmt.Sprintf(" %s=%s", l.GetName(), l.GetValue())
			}
			switch {
			case s.GetHistogram() != nil:
				fmt.Printf("%s%s count=%d sum=%v\n", mf.GetName(), labels, s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum())
			default:
				fmt.Printf("%s%s %v\n", mf.GetName(), labels, s.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// conveyor_job_duration_seconds job_type=BRIEF outcome=COMPLETE count=1 sum=120
	// conveyor_queue_depth agent=agent-a state=ready 1
	// conveyor_queue_depth agent=agent-a state=waiting 0
	// conveyor_queue_oldest_ready_age_seconds agent=agent-a 120
}
