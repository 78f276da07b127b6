package prommetrics_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/prommetrics"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestTenantLabels: each tenant's runs carry its own tenant_id, the
// default tenant's the configured one, and past MaxTenants the rest are
// "other".
func TestTenantLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		max  int
		want []string // the tenant_id values exported, sorted
	}{
		{"both tenants", 0, []string{"acme", "bolt", "gwi"}},
		{"bounded", 1, []string{"acme", "gwi", "other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			opts := []prommetrics.Option{prommetrics.Tenant("gwi")}
			if tc.max > 0 {
				opts = append(opts, prommetrics.MaxTenants(tc.max))
			}
			m, err := prommetrics.New(reg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, tenant := range []string{"acme", "bolt", "", "bolt"} {
				m.RunTransitionOf(tenant, "quick", "canonical", "requested", "running")
				m.RunFinishedOf(tenant, "quick", "completed", time.Second)
			}
			for _, name := range []string{"gwi_run_transitions_total", "gwi_run_duration_seconds"} {
				got := labelValues(t, reg, name, "tenant_id")
				if strings.Join(got, ",") != strings.Join(tc.want, ",") {
					t.Errorf("%s tenant_id = %v, want %v", name, got, tc.want)
				}
			}
			if n := testutil.CollectAndCount(reg, "gwi_run_transitions_total"); n != len(tc.want) {
				t.Errorf("%d series, want %d", n, len(tc.want))
			}
		})
	}
}

func labelValues(t *testing.T, reg *prometheus.Registry, metric, label string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// TestActiveGaugeByTenant: gwi_run_active_gauge counts each tenant's runs
// under its own tenant_id, read from the store, and the default tenant's
// under the configured label.
func TestActiveGaugeByTenant(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(reg, prommetrics.Tenant("gwi"))
	if err != nil {
		t.Fatal(err)
	}
	// No loop: the runs stay requested.
	r, err := run.NewRunner(run.Config{Store: memstore.New(), Owner: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		run.Agent{Slug: "plain", Steps: []run.Step{{Name: "a", Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchRuns(r); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "acme", "bolt"} {
		if _, err := r.Submit(lifecycle.WithTenant(context.Background(), tenant), lifecycle.SubmitRequest{AgentSlug: "plain"}); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP gwi_run_active_gauge Runs not yet terminal by status, read from the store at scrape time.
# TYPE gwi_run_active_gauge gauge
gwi_run_active_gauge{status="queued",tenant_id="acme"} 0
gwi_run_active_gauge{status="queued",tenant_id="bolt"} 0
gwi_run_active_gauge{status="queued",tenant_id="gwi"} 0
gwi_run_active_gauge{status="requested",tenant_id="acme"} 2
gwi_run_active_gauge{status="requested",tenant_id="bolt"} 1
gwi_run_active_gauge{status="requested",tenant_id="gwi"} 0
gwi_run_active_gauge{status="running",tenant_id="acme"} 0
gwi_run_active_gauge{status="running",tenant_id="bolt"} 0
gwi_run_active_gauge{status="running",tenant_id="gwi"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gwi_run_active_gauge"); err != nil {
		t.Fatal(err)
	}
}
