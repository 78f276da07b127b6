package jobqueue_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// tenantCounts is Counts under ctx as "tenant/agent/state", and its
// activity's completions.
func tenantCounts(t *testing.T, q *jobqueue.Queue, ctx context.Context) (map[string]int64, int) {
	t.Helper()
	op := jobqueue.Operator{Queue: q}
	c, err := op.Counts(ctx, lifecycle.ActorAdmin)
	if err != nil || c.Partial {
		t.Fatalf("counts: %+v, %v", c, err)
	}
	out, total := map[string]int64{}, map[lifecycle.JobState]int64{}
	for _, r := range c.Rows {
		for st, n := range r.Counts {
			out[fmt.Sprintf("%s/%s/%s", r.TenantID, r.AgentSlug, st)] += n
			total[st] += n
		}
	}
	if !maps.Equal(total, c.Total) {
		t.Fatalf("total %v, rows add up to %v", c.Total, total)
	}
	a, err := op.Activity(ctx, lifecycle.ActorAdmin)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, m := range a.Minutes {
		done += m.Completed
	}
	return out, done
}

// tenantList is the list of tenant's jobs (every tenant's for
// lifecycle.AllTenants) in tenantCounts's form.
func tenantList(t *testing.T, q *jobqueue.Queue, tenant string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for j, err := range q.List(lifecycle.WithTenant(context.Background(), tenant), lifecycle.ActorAdmin) {
		if err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s/%s/%s", j.TenantID, j.AgentSlug, j.Status)]++
	}
	return out
}

// TestCountsPerTenant: three tenants' jobs (acme's, bolt's, the
// default's) in one lane; Counts and Activity under each tenant's context
// count its jobs alone, and under every tenant's all of them, row by
// tenant, while the hour is open, once it is rolled up, and once its day
// is; the rollups name a named tenant and leave the default's unnamed.
func TestCountsPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0.Add(50 * time.Minute))
	s := storage.New(memstore.New())
	q := newQueue(t, s, clk, func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
	})
	tenants := map[string]context.Context{
		"acme": lifecycle.WithTenant(ctx, "acme"), "bolt": lifecycle.WithTenant(ctx, "bolt"),
		"": ctx, "*": lifecycle.WithTenant(ctx, lifecycle.AllTenants),
	}
	for _, tn := range []string{"acme", "acme", "bolt", "acme", "bolt", ""} {
		if _, err := q.Enqueue(tenants[tn], lifecycle.ActorGateway, jobqueue.NewJob{JobType: emailType, AgentSlug: "m"}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond) // the lane's order is theirs
	}
	for range 3 { // acme's two, bolt's first
		if _, err := claim(t, q, "w1").Run(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	running := claim(t, q, "w1") // acme's third, RUNNING
	want := map[string]struct {
		counts map[string]int64
		done   int
	}{
		"acme": {map[string]int64{"acme/m/COMPLETE": 2, "acme/m/RUNNING": 1}, 2},
		"bolt": {map[string]int64{"bolt/m/COMPLETE": 1, "bolt/m/QUEUED": 1}, 1},
		"":     {map[string]int64{"/m/QUEUED": 1}, 0},
		"*":    {map[string]int64{"acme/m/COMPLETE": 2, "acme/m/RUNNING": 1, "bolt/m/COMPLETE": 1, "bolt/m/QUEUED": 1, "/m/QUEUED": 1}, 3},
	}
	check := func(when string, activity bool) {
		t.Helper()
		for tn, w := range want {
			got, done := tenantCounts(t, q, tenants[tn])
			if list := tenantList(t, q, tn); !maps.Equal(got, w.counts) || !maps.Equal(list, w.counts) {
				t.Errorf("%s, tenant %q: counts %v, the list %v, want %v", when, tn, got, list, w.counts)
			}
			if activity && done != w.done {
				t.Errorf("%s, tenant %q: %d completed in the activity, want %d", when, tn, done, w.done)
			}
		}
	}
	check("the hour open", true)
	clk.Advance(50 * time.Minute) // the hour closes; the last hour still holds its minutes
	check("the hour rolled up", true)
	if n := countKeys(t, s, "stats/jobs/hours/"); n == 0 {
		t.Fatal("no hour rolled up")
	}
	clk.Advance(3 * 24 * time.Hour)
	check("the day rolled up", false)
	var day []byte
	for key, err := range s.List(ctx, "stats/jobs/days/") {
		if err != nil {
			t.Fatal(err)
		}
		if day, _, err = s.Get(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(string(day), `"tenant_id":"acme"`) || strings.Contains(string(day), `"tenant_id":""`) {
		t.Errorf("the day's rollup: %s", day)
	}
	_ = running // left RUNNING: its lease lapsed with the days
}

// TestOldRollupsAreTheDefaultTenants: the rollups a release before
// tenants wrote (no tenant in their rows) still decode and count as the
// default tenant's: its context and every tenant's see them, a named
// tenant's does not.
func TestOldRollupsAreTheDefaultTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0.Add(3*24*time.Hour + 30*time.Minute)
	s := storage.New(memstore.New())
	q := newQueue(t, s, clock.NewFake(now))
	day := now.Truncate(24 * time.Hour).Add(-24 * time.Hour) // the last closed day
	hour := now.Truncate(time.Hour).Add(-time.Hour)          // closed, within the last hour
	// As the release before tenants wrote them, byte for byte in form.
	old := map[string]string{
		"stats/jobs/days/" + day.Format("20060102") + ".json":           `{"day":"` + day.Format(time.RFC3339) + `","net":[{"job_type":"SEND_EMAIL","agent_slug":"old","machine":"general-job","state":"COMPLETE","n":5}]}`,
		"stats/jobs/hours/" + hour.Format("20060102T15") + "/0000.json": `{"through":"audit/x","last":true,"objects":2,"net":[{"job_type":"SEND_EMAIL","agent_slug":"old","machine":"general-job","state":"COMPLETE","n":2}],"minutes":[{"m":45,"completed":2,"run":[0,2],"max_run_ms":2}]}`,
	}
	for key, body := range old {
		if _, err := s.Put(ctx, key, []byte(body), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	for tn, w := range map[string]struct {
		counts map[string]int64
		done   int
	}{
		"":     {map[string]int64{"/old/COMPLETE": 7}, 2},
		"*":    {map[string]int64{"/old/COMPLETE": 7}, 2},
		"acme": {map[string]int64{}, 0},
	} {
		got, done := tenantCounts(t, q, lifecycle.WithTenant(ctx, tn))
		if !maps.Equal(got, w.counts) || done != w.done {
			t.Errorf("tenant %q: counts %v and %d completed, want %v and %d", tn, got, done, w.counts, w.done)
		}
	}
}
