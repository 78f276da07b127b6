package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A schedule starts a run of its agent at every slot of its cron
// expression, exactly once however many Schedulers share the store. On a
// fake clock the example moves through three slots in no real time.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 30, 0, time.UTC))
	store := memstore.New()
	report := func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }
	r, _ := run.NewRunner(run.Config{Store: store, Clock: clk, Logger: quiet},
		run.Agent{Slug: "reporter", Steps: []run.Step{{Name: "report", Run: report}}})
	s, _ := schedule.New(schedule.Config{Runner: r, Store: store, Clock: clk, Logger: quiet,
		Schedules: []schedule.Schedule{{ID: "digest", Agent: "reporter", Cron: "*/5 * * * *"}}})
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()

	<-clk.WaitForTimers(1) // the Scheduler waits for its first slot, 00:05
	for range 3 {
		clk.Advance(5 * time.Minute)
		<-clk.WaitForTimers(1)
	}
	runs, _ := r.Runs(ctx, "reporter")
	for _, st := range runs {
		fmt.Println(st.Trigger, st.IdempotencyKey)
	}
	infos, _ := s.List(ctx)
	fmt.Println("next:", infos[0].Next.Format(time.TimeOnly))
	stop()
	<-done
	// Output:
	// cron scheduler:digest:2026-03-01T00:05:00Z
	// cron scheduler:digest:2026-03-01T00:10:00Z
	// cron scheduler:digest:2026-03-01T00:15:00Z
	// next: 00:20:00
}
