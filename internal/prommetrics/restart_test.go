package prommetrics_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	promadapter "github.com/runconveyor/conveyor/internal/prommetrics"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// gauges reads gwi_run_active_gauge by status.
func gauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "gwi_run_active_gauge" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// storeActive counts the store's runs not yet terminal, by status.
func storeActive(t *testing.T, s *storage.Store, slug string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	prefix, _ := layout.AgentRunsPrefix(slug)
	for key, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		if rest := strings.TrimPrefix(key, prefix); strings.Count(rest, "/") != 1 || !strings.HasSuffix(rest, "/status.json") {
			continue
		}
		st, _, err := records.Read[lifecycle.RunStatus](context.Background(), s, key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != "completed" && st.Status != "failed" {
			out[st.Status]++
		}
	}
	return out
}

// TestRunActiveGaugeAfterRestart (issue 18 defect 4): a runner restarted
// with runs in flight reports gwi_run_active_gauge from the store's state:
// never negative, and equal to the store's count by status while the runs
// go on and once they end.
func TestRunActiveGaugeAfterRestart(t *testing.T) {
	t.Parallel()
	const n = 5
	s := memstore.New()
	block := make(chan struct{})
	started := make(chan struct{}, n)
	step := func(release bool) run.Step {
		return run.Step{Name: "work", Idempotent: true, Run: func(ctx context.Context, _ run.StepInput) (run.StepOutput, error) {
			if release {
				<-block
				return run.StepOutput{}, nil
			}
			started <- struct{}{}
			<-ctx.Done()
			return run.StepOutput{}, ctx.Err()
		}}
	}
	// The first life: n runs in their step when it is stopped.
	_, m1 := newMetrics(t)
	first, err := run.NewRunner(run.Config{Store: s, Owner: "svc", Logger: quiet, Metrics: m1, Concurrency: n},
		run.Agent{Slug: "work", Steps: []run.Step{step(false)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = first.Run(ctx) }()
	for range n {
		if _, err := first.Submit(context.Background(), lifecycle.SubmitRequest{AgentSlug: "work"}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		<-started
	}
	stop()
	<-done

	// The second life, same owner: it takes its runs back at once.
	reg, m2 := newMetrics(t)
	second, err := run.NewRunner(run.Config{Store: s, Owner: "svc", Logger: quiet, Metrics: m2, Concurrency: n},
		run.Agent{Slug: "work", Steps: []run.Step{step(true)}})
	if err != nil {
		t.Fatal(err)
	}
	watch(t, m2, second)
	check := func(when string) {
		t.Helper()
		got, want := gauges(t, reg), storeActive(t, s, "work")
		for status, v := range got {
			if v < 0 {
				t.Errorf("%s: gwi_run_active_gauge{status=%q} = %v", when, status, v)
			}
			if v != want[status] {
				t.Errorf("%s: gwi_run_active_gauge{status=%q} = %v, the store has %v", when, status, v, want[status])
			}
		}
		for status, v := range want {
			if got[status] != v {
				t.Errorf("%s: the store has %v runs %s, the gauge %v", when, v, status, got[status])
			}
		}
	}
	check("restarted, before Run")
	ctx, stop = context.WithCancel(context.Background())
	done = make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { stop(); <-done }) }
	t.Cleanup(end)
	go func() { defer close(done); _ = second.Run(ctx) }()
	close(block)
	deadline := time.Now().Add(30 * time.Second)
	for len(storeActive(t, s, "work")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("runs still active: %v", storeActive(t, s, "work"))
		}
		// The runs move between the scrape and the count: only the bounds
		// hold here.
		for status, v := range gauges(t, reg) {
			if v < 0 || v > n {
				t.Fatalf("while the runs end: gwi_run_active_gauge{status=%q} = %v", status, v)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	check("every run ended")
	end()
}

func watch(t *testing.T, m *promadapter.Metrics, r *run.Runner) {
	t.Helper()
	if err := m.WatchRuns(r); err != nil {
		t.Fatal(err)
	}
}
