package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// A submission again under the id of a processed entry, whose create-only
// write a store that settles took over the entry (issue 27), put it back
// to pending: the validation gate would process it a second time.
func TestSettleSubmitOverAProcessedEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	fs.SetSettle(10*time.Second, nil)
	b := newBox(t, storage.New(fs), clock.NewFake(t0))
	gw := lifecycle.ActorGateway
	if _, err := b.Submit(ctx, gw, sub("inbox_a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Process(ctx, gw, "inbox_a", "proposal-1"); err != nil {
		t.Fatal(err)
	}
	fs.AcceptCreateOver(1)
	if _, err := b.Submit(ctx, gw, sub("inbox_a")); !errors.Is(err, lifecycle.ErrInboxEntryExists) {
		t.Fatalf("second Submit: %v; want ErrEntryExists", err)
	}
	if e, err := b.Get(ctx, "inbox_a"); err != nil || e.Status != lifecycle.InboxProcessed {
		t.Fatalf("entry %+v, %v; want it processed still", e, err)
	}
}
