package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// TestScheduleTenant: a schedule naming a tenant starts its slots' runs,
// and enqueues its slots' jobs (under their slots' ids), in that tenant,
// exactly once a slot with two processes racing; the default tenant sees
// none of them, and a schedule without a tenant still fills the default
// one.
func TestScheduleTenant(t *testing.T) {
	t.Parallel()
	acme := lifecycle.WithTenant(context.Background(), "acme")
	t.Run("runs", func(t *testing.T) {
		t.Parallel()
		g := newRig(t, nil)
		sc := every5("digest")
		sc.Tenant = "acme"
		procs := []*proc{g.start(nil, sc, every5("plain")), g.start(nil, sc, every5("plain"))}
		g.settle(g.clock, 2)
		for range 3 {
			g.clock.Advance(5 * time.Minute)
			g.settle(g.clock, 2)
		}
		r := procs[0].runner
		theirs, err := r.Runs(acme, agent)
		if err != nil {
			t.Fatal(err)
		}
		want := slotKeys("digest", day0, g.clock.Now())
		var keys []string
		for _, st := range theirs {
			if st.TenantID != "acme" {
				t.Errorf("run %s of tenant %q, want acme", st.RunID, st.TenantID)
			}
			keys = append(keys, st.IdempotencyKey) // the slot's, unscoped
		}
		slices.Sort(keys)
		if fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("acme's runs %v, want one a slot: %v", keys, want)
		}
		// The default tenant lists only the schedule without a tenant.
		mine := g.runs(r)
		if fmt.Sprint(mine) != fmt.Sprint(slotKeys("plain", day0, g.clock.Now())) {
			t.Fatalf("the default tenant's runs %v, want only plain's", mine)
		}
	})
	t.Run("jobs", func(t *testing.T) {
		t.Parallel()
		g := newRig(t, nil)
		sc := digestEvery("digest", 5*time.Minute)
		sc.Tenant = "acme"
		procs := []*jobProc{g.startJobs(sc), g.startJobs(sc)}
		g.settle(g.clock, 2)
		for range 3 {
			g.clock.Advance(5 * time.Minute)
			g.settle(g.clock, 2)
		}
		q := procs[1].queue
		want := slotKeys("digest", day0, g.clock.Now())
		var got []string
		for j, err := range q.List(acme, lifecycle.ActorOrchestration) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, j.JobID)
		}
		slices.Sort(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("acme's jobs %v, want one a slot under its slot's id: %v", got, want)
		}
		if mine := jobs(t, q); len(mine) != 0 {
			t.Fatalf("the default tenant lists acme's jobs: %v", mine)
		}
		for _, id := range want {
			j, err := q.Job(acme, id)
			if err != nil || j.TenantID != "acme" {
				t.Fatalf("acme's job %s: %+v, %v; want tenant acme", id, j, err)
			}
			if _, err := q.Job(context.Background(), id); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("the default tenant reads acme's job %s: %v, want not found", id, err)
			}
		}
	})
}

// TestScheduleTenantMixed: processes that disagree on a schedule's tenant
// (one of an earlier release, which knows none, or a tenant's edit
// rolling out) still fire each slot once: one run, or one job, in the
// tenant of the process that fired it.
func TestScheduleTenantMixed(t *testing.T) {
	t.Parallel()
	all := lifecycle.WithTenant(context.Background(), lifecycle.AllTenants)
	t.Run("runs", func(t *testing.T) {
		t.Parallel()
		g := newRig(t, nil)
		theirs := every5("digest")
		theirs.Tenant = "acme"
		p := g.start(nil, every5("digest"))
		g.start(nil, theirs)
		g.settle(g.clock, 2)
		for range 6 {
			g.clock.Advance(5 * time.Minute)
			g.settle(g.clock, 2)
		}
		sts, err := p.runner.Runs(all, agent)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, st := range sts {
			keys = append(keys, st.IdempotencyKey)
		}
		slices.Sort(keys)
		if want := slotKeys("digest", day0, g.clock.Now()); fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("runs of the slots %v, want one a slot: %v", keys, want)
		}
	})
	t.Run("jobs", func(t *testing.T) {
		t.Parallel()
		g := newRig(t, nil)
		theirs := digestEvery("digest", 5*time.Minute)
		theirs.Tenant = "acme"
		p := g.startJobs(digestEvery("digest", 5*time.Minute))
		g.startJobs(theirs)
		g.settle(g.clock, 2)
		for range 6 {
			g.clock.Advance(5 * time.Minute)
			g.settle(g.clock, 2)
		}
		var ids []string
		for j, err := range p.queue.List(all, lifecycle.ActorOrchestration) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.JobID)
		}
		slices.Sort(ids)
		if want := slotKeys("digest", day0, g.clock.Now()); fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("jobs of the slots %v, want one a slot: %v", ids, want)
		}
	})
}

// TestScheduleTenantInvalid: a tenant that is no storage id, or every
// tenant's "*", is refused when the Scheduler is made.
func TestScheduleTenantInvalid(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"*", "a/b", "../x", "a b"} {
		sc := digestEvery("digest", time.Minute)
		sc.Tenant = tenant
		g := newRig(t, nil)
		q, err := jobqueue.New(jobqueue.Config{Store: g.store, Clock: g.clock, Logger: quiet, Types: jobTypes})
		if err != nil {
			t.Fatal(err)
		}
		_, err = schedule.New(schedule.Config{Queue: q, Store: g.store, Clock: g.clock, Logger: quiet, Schedules: []schedule.Schedule{sc}})
		var ie *lifecycle.InputError
		if err == nil || !errors.As(err, &ie) && !errors.Is(err, storage.ErrInvalidID) {
			t.Errorf("tenant %q: New = %v, want it refused", tenant, err)
		}
	}
}
