package artifact_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestDefaultProject: with Config.Project set, an empty cid reads that
// project (Get, GetForJob, List); without it an empty cid is refused, as
// before.
func TestDefaultProject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	st, err := artifact.New(artifact.Config{Store: s, Clock: clock.NewFake(t0), Project: "proj", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := st.Create(ctx, lifecycle.ActorNLMBackend, "proj", draft("job-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.Get(ctx, lifecycle.ActorAdmin, "", a.ArtifactID); err != nil || got.ArtifactID != a.ArtifactID {
		t.Fatalf("Get with an empty cid: %+v, %v", got, err)
	}
	if got, err := st.GetForJob(ctx, lifecycle.ActorAdmin, "", "job-1"); err != nil || got.ProjectID != "proj" {
		t.Fatalf("GetForJob with an empty cid: %+v, %v", got, err)
	}
	n := 0
	for got, err := range st.List(ctx, lifecycle.ActorAdmin, "") {
		if err != nil || got.ArtifactID != a.ArtifactID {
			t.Fatalf("List with an empty cid: %+v, %v", got, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("List with an empty cid: %d artifacts, want 1", n)
	}
	plain := newStore(t, s, clock.NewFake(t0))
	var idErr *storekey.IDError
	if _, err := plain.GetForJob(ctx, lifecycle.ActorAdmin, "", "job-1"); !errors.As(err, &idErr) {
		t.Fatalf("without Config.Project an empty cid: %v, want a *storage.IDError", err)
	}
}
