package prommetrics_test

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	promadapter "github.com/runconveyor/conveyor/internal/prommetrics"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// scrape renders reg in the text format, as /metrics serves it.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestRuntimeCollectors: New adds the Go and process collectors to a
// registry without them, and leaves a registry's own in place, whatever
// their options, without failing.
func TestRuntimeCollectors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		own  []prometheus.Collector
	}{
		{"empty registry", nil},
		{"the program's own, default options", []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}},
		{"the program's own Go collector, other options", []prometheus.Collector{
			collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			reg.MustRegister(tc.own...)
			if _, err := promadapter.New(reg, promadapter.Logger(quiet)); err != nil {
				t.Fatalf("New on a registry with its own collectors: %v", err)
			}
			text := scrape(t, reg)
			for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
				if !regexp.MustCompile(`(?m)^` + name + ` `).MatchString(text) {
					t.Errorf("%s missing from /metrics", name)
				}
			}
		})
	}
}

// TestSeed: every series of the configured agents and job types is there at
// zero before any event, and only theirs (bounded labels); the first event
// moves the seeded series.
func TestSeed(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics(t)
	agents := []run.Agent{
		{Slug: "research", Steps: []run.Step{{Name: "fetch"}}},
		{Slug: "review", Machine: lifecycle.MachineApproval},
	}
	m.Seed(agents, []lifecycle.JobType{"SEND_EMAIL", lifecycle.JobBrief})
	text := scrape(t, reg)
	for _, want := range []string{
		`conveyor_run_transitions_total{agent="research",from_state="",to_state="requested"} 0`,
		`conveyor_run_transitions_total{agent="research",from_state="running",to_state="completed"} 0`,
		`gwi_run_transitions_total{from_state="queued",tenant_id="",to_state="running"} 0`,
		`gwi_run_duration_seconds_count{status="failed",tenant_id="",type="research"} 0`,
		`conveyor_run_step_duration_seconds_count{agent="research",status="failed",step="fetch"} 0`,
		`conveyor_run_steps_abandoned_total{agent="research",step="fetch"} 0`,
		`conveyor_job_transitions_total{from_state="",job_type="SEND_EMAIL",to_state="PENDING"} 0`,
		`conveyor_job_transitions_total{from_state="RETRY_BACKOFF",job_type="SEND_EMAIL",to_state="QUEUED"} 0`,
		`conveyor_job_transitions_total{from_state="FAILED",job_type="SEND_EMAIL",to_state="DEAD"} 0`,
		`conveyor_job_duration_seconds_count{job_type="SEND_EMAIL",outcome="DEAD"} 0`,
		`conveyor_job_state_duration_seconds_count{job_type="SEND_EMAIL",state="QUEUED"} 0`,
		`conveyor_jobs_dead_total{job_type="SEND_EMAIL"} 0`,
		`conveyor_job_retries_total{job_type="SEND_EMAIL"} 0`,
		`conveyor_job_lease_losses_total{job_type="SEND_EMAIL"} 0`,
		// Each type's own machine: the user's type the general one, an
		// NLM type the spec's pipeline.
		`conveyor_job_transitions_total{from_state="QUEUED",job_type="SEND_EMAIL",to_state="RUNNING"} 0`,
		`conveyor_job_transitions_total{from_state="RUNNING",job_type="SEND_EMAIL",to_state="CANCELLED"} 0`,
		`conveyor_job_duration_seconds_count{job_type="SEND_EMAIL",outcome="CANCELLED"} 0`,
		`conveyor_job_state_duration_seconds_count{job_type="SEND_EMAIL",state="RUNNING"} 0`,
		`conveyor_job_transitions_total{from_state="QUEUED",job_type="BRIEF",to_state="CONTEXT_ASSEMBLY"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("missing before any event: %s", want)
		}
	}
	// No NLM stage for the user's type, no RUNNING for the NLM type.
	for _, bad := range []string{`job_type="SEND_EMAIL",to_state="CONTEXT_ASSEMBLY"`, `job_type="SEND_EMAIL",to_state="NOTEBOOKLM_CALL"`,
		`job_type="BRIEF",to_state="RUNNING"`, `job_type="BRIEF",state="RUNNING"`} {
		if strings.Contains(text, bad) {
			t.Errorf("seeded a series of another machine: %s", bad)
		}
	}
	// The approval machine's own states are seeded for its agent only.
	approval := regexp.MustCompile(`(?m)^conveyor_run_transitions_total\{agent="(\w+)",from_state="awaiting_approval"`)
	for _, mt := range approval.FindAllStringSubmatch(text, -1) {
		if mt[1] != "review" {
			t.Errorf("agent %s seeded with the approval machine's states", mt[1])
		}
	}
	if !approval.MatchString(text) {
		t.Error("the approval agent's own states are not seeded")
	}
	// Bounded: one series per edge of each agent's machine, no more.
	per := map[string]int{}
	for _, mt := range regexp.MustCompile(`(?m)^conveyor_run_transitions_total\{agent="(\w+)"`).FindAllStringSubmatch(text, -1) {
		per[mt[1]]++
	}
	if len(per) != 2 || per["research"] != 8 {
		t.Errorf("run transition series per agent: %v, want research: 8 (the canonical machine's 7 edges and creation) and review", per)
	}

	m.RunTransition("research", lifecycle.MachineCanonical, "queued", "running")
	text = scrape(t, reg)
	if !strings.Contains(text, `conveyor_run_transitions_total{agent="research",from_state="queued",to_state="running"} 1`+"\n") ||
		!strings.Contains(text, `gwi_run_transitions_total{from_state="queued",tenant_id="",to_state="running"} 1`+"\n") {
		t.Error("the first event did not move the seeded series to 1")
	}
}
