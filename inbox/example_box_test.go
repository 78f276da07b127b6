package inbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

func ExampleBox() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC))
	box, _ := inbox.New(inbox.Config{Store: memstore.New(), Clock: clk})
	s := lifecycle.InboxSubmission{
		ID:     "inbox_2026-02-14_abc123",
		Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "notes/violin.pp.ua/sonata-bwv1001"},
	}
	e, _ := box.Submit(ctx, lifecycle.ActorGateway, s)
	fmt.Println(e.Status, e.Metadata.TTLHours)

	clk.Advance(72 * time.Hour)
	moved, _ := box.ExpireDue(ctx, lifecycle.ActorSystem)
	fmt.Println(moved)

	stats, _ := box.Stats(ctx)
	fmt.Printf("%+v\n", stats)
	// Output:
	// pending 72
	// [inbox_2026-02-14_abc123]
	// {Pending:0 Processed:0 Rejected:0 Expired:1 Total:1}
}
