package run

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// RunnerLostAt is a read's verdict: a status write never stores it, even
// when the document it changes carries one (a writer seeded from a read).
func TestStatusWriterNeverStoresRunnerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New()
	r, err := NewRunner(Config{Store: store, Owner: "w", Clock: clock.NewFake(time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Agent{Slug: "lost-writer", Steps: []Step{{Name: "one", Run: func(context.Context, StepInput) (StepOutput, error) { return StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "lost-writer"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := layout.RunStatusKey("lost-writer", res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	doc, ver, err := r.sched.statuses.read(ctx, "lost-writer", res.RunID, key)
	if err != nil {
		t.Fatal(err)
	}
	lost := r.cfg.Clock.Now().UTC().Add(-time.Minute)
	doc.RunnerLostAt = &lost
	w := r.sched.writers.newWriter("lost-writer", res.RunID, key, &doc, ver)
	if err := w.apply(ctx, bySystem(), func(_ context.Context, d *lifecycle.RunStatus) error {
		d.CurrentStep = "one"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, _, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "runner_lost_at") || !strings.Contains(string(b), `"current_step":"one"`) {
		t.Fatalf("stored status: %s", b)
	}
}
