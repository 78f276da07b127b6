package artifact_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

var t0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

const brief = `{"title":"t","body":"b","entity_map":{},"word_count":1}`

func newStore(t testing.TB, s *storage.Store, c clock.Clock) *artifact.Store {
	t.Helper()
	a, err := artifact.New(artifact.Config{Store: s, Clock: c, BaseURL: "https://minio.internal/bucket/", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func draft(job string) artifact.Draft {
	return artifact.Draft{JobID: job, RunID: "run_2026-02-24_abc123", Type: artifact.Brief, AgentSlug: "architect-guardian",
		EntityRefs: []string{"e1"}, Tags: []string{"research"}, Content: json.RawMessage(brief),
		Sources: []lifecycle.SourceRef{{Ref: "sources/domain-knowledge.md", Excerpt: "..."}}}
}

func keys(t testing.TB, s *storage.Store, prefix string) []string {
	t.Helper()
	var out []string
	for k, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

func TestIDForJob(t *testing.T) {
	t.Parallel()
	a, b := artifact.IDForJob("job-1"), artifact.IDForJob("job-2")
	if a != artifact.IDForJob("job-1") || a == b {
		t.Fatalf("ids %s %s", a, b)
	}
	if !strings.HasPrefix(a, "art-") || len(a) != 40 || a[18] != '8' {
		t.Fatalf("id %q is not art-<uuid v8>", a)
	}
	if err := storekey.ValidateID("artifact id", artifact.IDForJob(strings.Repeat("x", storekey.MaxIDLen))); err != nil {
		t.Fatal(err)
	}
}

func TestCreateOncePerJob(t *testing.T) {
	env.Each(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		st := newStore(t, s, clk)
		a, created, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", draft("job-1"))
		if err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
		if a.ArtifactID != artifact.IDForJob("job-1") || !a.Finalized || a.FinalizedAt == nil || !a.CreatedAt.Equal(t0) ||
			a.Version != 1 || a.URL != "https://minio.internal/bucket/projects/cid-1/artifacts/"+a.ArtifactID+".json" {
			t.Fatalf("artifact %+v", a)
		}
		// A second write for the same job, with other content: the stored
		// one comes back, unchanged, without error.
		clk.Advance(time.Minute)
		d := draft("job-1")
		d.Content = json.RawMessage(`{"title":"other","body":"x","entity_map":{},"word_count":9}`)
		again, created, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", d)
		if err != nil || created || string(again.Content) != brief || !again.CreatedAt.Equal(t0) {
			t.Fatalf("second create: %+v %v %v", again, created, err)
		}
		got, err := st.GetForJob(ctx, lifecycle.ActorFrontend, "cid-1", "job-1")
		if err != nil || string(got.Content) != brief || got.Version != 1 {
			t.Fatalf("get: %+v %v", got, err)
		}
		if n := len(keys(t, s, "projects/")); n != 1 {
			t.Fatalf("%d artifact objects", n)
		}
		// The audit log has the one creation.
		n := 0
		for ev, err := range records.ReadAuditDay(ctx, s, t0) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Event != "artifact.create" || ev.ArtifactID != a.ArtifactID || ev.Actor != "nlm-backend" {
				t.Fatalf("audit %+v", ev)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("%d audit events", n)
		}
	})
}

// TestConcurrentCreates: writers racing for one job end with one artifact
// and all of them see it.
func TestConcurrentCreates(t *testing.T) {
	env.Each(t, func(t *testing.T, s *storage.Store) {
		st := newStore(t, s, clock.Real())
		var wg sync.WaitGroup
		var mu sync.Mutex
		created := 0
		ids := map[string]bool{}
		contents := map[string]bool{}
		for i := range 8 {
			wg.Go(func() {
				d := draft("job-race")
				d.Content = json.RawMessage(fmt.Sprintf(`{"title":"w%d","body":"b","entity_map":{},"word_count":1}`, i))
				a, c, err := st.Create(context.Background(), lifecycle.ActorNLMBackend, "cid", d)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if c {
					created++
				}
				ids[a.ArtifactID] = true
				contents[string(a.Content)] = true
			})
		}
		wg.Wait()
		if created != 1 || len(ids) != 1 || len(contents) != 1 {
			t.Fatalf("created %d, ids %v, contents %d", created, ids, len(contents))
		}
	})
}

func TestCreateRefusesBadDraftsAndWritesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cid  string
		mod  func(*artifact.Draft)
	}{
		{"cid path", "../x", nil},
		{"job id", "cid", func(d *artifact.Draft) { d.JobID = "a/b" }},
		{"run id", "cid", func(d *artifact.Draft) { d.RunID = "run 1" }},
		{"agent", "cid", func(d *artifact.Draft) { d.AgentSlug = "" }},
		{"type", "cid", func(d *artifact.Draft) { d.Type = "NOTE" }},
		{"content", "cid", func(d *artifact.Draft) { d.Content = json.RawMessage(`{"title":"t"}`) }},
		{"source", "cid", func(d *artifact.Draft) { d.Sources = []lifecycle.SourceRef{{}} }},
	}
	for _, tt := range tests {
		s := env.Cases()[0].New(t)
		st := newStore(t, s, clock.NewFake(t0))
		d := draft("job-1")
		if tt.mod != nil {
			tt.mod(&d)
		}
		_, _, err := st.Create(context.Background(), lifecycle.ActorNLMBackend, tt.cid, d)
		if !errors.Is(err, artifact.ErrInvalidArtifact) {
			t.Errorf("%s: %v, want ErrInvalidArtifact", tt.name, err)
		}
		if k := keys(t, s, ""); len(k) != 0 {
			t.Errorf("%s: wrote %v", tt.name, k)
		}
	}
}

// TestAuthorityOnEveryCall covers every actor on every operation of
// the artifacts matrix (docs/spec.md#authority-matrix) as the store enforces it: WriteNew (Create), Read (Get, List),
// Delete (Delete, Cleanup); there is no Modify call at all.
func TestAuthorityOnEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, actor := range authority.Actors() {
		s := env.Cases()[0].New(t)
		clk := clock.NewFake(t0)
		st := newStore(t, s, clk)
		_, _, err := st.Create(ctx, actor, "cid", draft("job-"+string(actor)))
		wantWrite := actor == lifecycle.ActorNLMBackend
		if wantWrite != (err == nil) {
			t.Errorf("Create by %s: %v", actor, err)
		}
		if err != nil {
			if !errors.Is(err, authority.ErrForbidden) {
				t.Errorf("Create by %s: %v is not FORBIDDEN", actor, err)
			}
			if k := keys(t, s, ""); len(k) != 0 {
				t.Errorf("refused Create by %s wrote %v", actor, k)
			}
		}
		if _, _, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid", draft("job-x")); err != nil {
			t.Fatal(err)
		}
		wantRead := actor != lifecycle.ActorMastra && actor != lifecycle.ActorSystem
		_, err = st.GetForJob(ctx, actor, "cid", "job-x")
		if wantRead != (err == nil) || (err != nil && !errors.Is(err, authority.ErrForbidden)) {
			t.Errorf("Get by %s: %v", actor, err)
		}
		n := 0
		for _, err := range st.List(ctx, actor, "cid") {
			if wantRead != (err == nil) {
				t.Errorf("List by %s: %v", actor, err)
			}
			n++
		}
		if n == 0 {
			t.Errorf("List by %s yielded nothing", actor)
		}
		clk.Advance(artifact.DefaultCleanupAge + time.Second)
		before := len(keys(t, s, "projects/"))
		err = st.Delete(ctx, actor, "cid", artifact.IDForJob("job-x"))
		if (actor == lifecycle.ActorAdmin) != (err == nil) || (err != nil && !errors.Is(err, authority.ErrForbidden)) {
			t.Errorf("Delete of an old artifact by %s: %v", actor, err)
		}
		if actor != lifecycle.ActorAdmin {
			if len(keys(t, s, "projects/")) != before {
				t.Errorf("refused Delete by %s deleted", actor)
			}
			if _, err := st.Cleanup(ctx, actor, "cid"); !errors.Is(err, authority.ErrForbidden) {
				t.Errorf("Cleanup by %s: %v", actor, err)
			}
		}
	}
}

func TestDeleteOnlyOldByAdmin(t *testing.T) {
	env.Each(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		st := newStore(t, s, clk)
		if _, _, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid", draft("old")); err != nil {
			t.Fatal(err)
		}
		clk.Advance(20 * 24 * time.Hour)
		if _, _, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid", draft("young")); err != nil {
			t.Fatal(err)
		}
		err := st.Delete(ctx, lifecycle.ActorAdmin, "cid", artifact.IDForJob("old"))
		var fe *authority.ForbiddenError
		if !errors.As(err, &fe) || fe.Code() != "FORBIDDEN" || !strings.Contains(err.Error(), "older than") {
			t.Fatalf("deleting a 20-day-old artifact: %v", err)
		}
		clk.Advance(11 * 24 * time.Hour)
		got, err := st.Cleanup(ctx, lifecycle.ActorAdmin, "cid")
		if err != nil || len(got) != 1 || got[0] != artifact.IDForJob("old") {
			t.Fatalf("cleanup: %v %v", got, err)
		}
		if k := keys(t, s, "projects/"); len(k) != 1 || !strings.Contains(k[0], artifact.IDForJob("young")) {
			t.Fatalf("left %v", k)
		}
		if err := st.Delete(ctx, lifecycle.ActorAdmin, "cid", artifact.IDForJob("old")); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("deleting a deleted artifact: %v", err)
		}
	})
}

func TestNewNeedsAStore(t *testing.T) {
	t.Parallel()
	if _, err := artifact.New(artifact.Config{}); err == nil {
		t.Fatal("New without a store succeeded")
	}
}

// TestCreateFencedByEpoch: a draft with an epoch (a job claim's) is fenced:
// the same epoch gets its own artifact back, an older stored epoch (a lost
// attempt's) is replaced, and a newer stored epoch refuses the write with
// ErrLeaseLost, writing nothing.
func TestCreateFencedByEpoch(t *testing.T) {
	tests := []struct {
		name        string
		stored      int64 // epoch of the artifact already there; -1: none
		epoch       int64
		wantErr     error
		wantCreated bool
		wantEpoch   int64
		wantVersion int64
	}{
		{"none stored", -1, 3, nil, true, 3, 1},
		{"same epoch", 3, 3, nil, false, 3, 1},
		{"older epoch replaced", 2, 3, nil, true, 3, 2},
		{"unfenced one replaced", 0, 3, nil, true, 3, 2},
		{"newer epoch wins", 4, 3, lifecycle.ErrLeaseLost, false, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env.Each(t, func(t *testing.T, s *storage.Store) {
				ctx := context.Background()
				st := newStore(t, s, clock.NewFake(t0))
				if tt.stored >= 0 {
					d := draft("job-1")
					d.Epoch, d.Content = tt.stored, json.RawMessage(`{"title":"old","body":"b","entity_map":{},"word_count":1}`)
					if _, _, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", d); err != nil {
						t.Fatal(err)
					}
				}
				d := draft("job-1")
				d.Epoch = tt.epoch
				a, created, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", d)
				if !errors.Is(err, tt.wantErr) || (err == nil && created != tt.wantCreated) {
					t.Fatalf("Create: created %v, %v; want %v, %v", created, err, tt.wantCreated, tt.wantErr)
				}
				got, err := st.GetForJob(ctx, lifecycle.ActorAdmin, "cid-1", "job-1")
				if err != nil {
					t.Fatal(err)
				}
				if got.Epoch != tt.wantEpoch || got.Version != tt.wantVersion {
					t.Fatalf("stored epoch %d version %d; want %d, %d", got.Epoch, got.Version, tt.wantEpoch, tt.wantVersion)
				}
				if tt.wantErr == nil && (a.Epoch != tt.epoch || got.Epoch != tt.epoch) {
					t.Fatalf("returned epoch %d", a.Epoch)
				}
			})
		})
	}
}

// TestCreateWrite: a fenced, audited draft's write, committed, stores the
// artifact CreateWrite returned, as Create stores it (read back equal); a
// second one is refused by its create-only condition; an unfenced or
// unaudited draft, or an actor without WriteNew, gets no write.
func TestCreateWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	st := newStore(t, s, clock.NewFake(t0))
	d := draft("job-1")
	d.Epoch, d.Audited = 3, true
	a, w, err := st.CreateWrite(lifecycle.ActorNLMBackend, "cid-1", d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, []storage.Write{w}); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetForJob(ctx, lifecycle.ActorAdmin, "cid-1", "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 3 || got.Version != 1 || !got.Finalized || got.ArtifactID != a.ArtifactID || got.URL != a.URL {
		t.Fatalf("stored %+v, returned %+v", got, a)
	}
	if _, err := s.Commit(ctx, []storage.Write{w}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("a second commit of the write: %v, want ErrPreconditionFailed", err)
	}
	for _, tc := range []struct {
		name  string
		actor lifecycle.Actor
		edit  func(*artifact.Draft)
	}{
		{"unfenced", lifecycle.ActorNLMBackend, func(d *artifact.Draft) { d.Epoch = 0 }},
		{"not audited", lifecycle.ActorNLMBackend, func(d *artifact.Draft) { d.Audited = false }},
		{"actor without WriteNew", lifecycle.ActorGateway, func(*artifact.Draft) {}},
	} {
		d := draft("job-2")
		d.Epoch, d.Audited = 3, true
		tc.edit(&d)
		if _, w, err := st.CreateWrite(tc.actor, "cid-1", d); err == nil || w.Key != "" {
			t.Errorf("%s: write %q, %v; want none and an error", tc.name, w.Key, err)
		}
	}
}
