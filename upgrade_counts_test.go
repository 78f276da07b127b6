package conveyor_test

import (
	"context"
	"maps"
	"testing"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// checkOldCounts: the fixture's jobs, written before tenants (no tenant
// in their records nor their audit events), count as the default
// tenant's: its count and every tenant's have them, rolled up as today
// rolls them (rows with no tenant), and a named tenant's has none.
func checkOldCounts(ctx context.Context, t *testing.T, c *conveyor.Client) {
	t.Helper()
	op := jobqueue.Operator{Queue: c.Jobs()}
	old := map[lifecycle.JobState]int64{lifecycle.JobComplete: 1, lifecycle.JobDead: 1, lifecycle.JobQueued: 1}
	for tenant, want := range map[string]map[lifecycle.JobState]int64{"": old, lifecycle.AllTenants: old, "acme": {}} {
		counts, err := op.Counts(lifecycle.WithTenant(ctx, tenant), lifecycle.ActorAdmin)
		if err != nil || counts.Partial {
			t.Errorf("Counts as tenant %q: %+v, %v", tenant, counts, err)
			continue
		}
		got := map[lifecycle.JobState]int64{}
		for _, r := range counts.Rows {
			if r.AgentSlug != "upg-jobs" {
				continue
			}
			if r.TenantID != "" {
				t.Errorf("tenant %q: a row of the fixture's jobs names tenant %q", tenant, r.TenantID)
			}
			for st, n := range r.Counts {
				got[st] += n
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("Counts as tenant %q: the fixture's jobs %v, want %v", tenant, got, want)
		}
	}
}
