package artifact_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// An artifact created again for its job, whose create-only write a store
// that settles took over the first (issue 27), replaced the create-once
// artifact's content.
func TestSettleArtifactCreatedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	fs.SetSettle(10*time.Second, nil)
	clk := clock.NewFake(t0)
	s := newStore(t, storage.New(fs), clk)
	first, created, err := s.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", draft("job-1"))
	if err != nil || !created {
		t.Fatalf("create: %v, %v", created, err)
	}
	clk.Advance(time.Minute)
	fs.AcceptCreateOver(1)
	d := draft("job-1")
	d.Content = json.RawMessage(`{"title":"other","body":"a second create","entity_map":{},"word_count":3}`)
	again, created, err := s.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", d)
	if err != nil || created || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("second create: created %v, %v, created at %v; want the first artifact", created, err, again.CreatedAt)
	}
	got, err := s.Get(ctx, lifecycle.ActorNLMBackend, "cid-1", first.ArtifactID)
	if err != nil || string(got.Content) != string(first.Content) {
		t.Fatalf("artifact now %s, %v; want the first content", got.Content, err)
	}
}
