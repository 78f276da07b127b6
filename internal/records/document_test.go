package records_test

import (
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

type runStatus struct {
	lifecycle.Meta

	RunID  string `json:"run_id"`
	Status string `json:"status"`
	Steps  int    `json:"steps_completed"`
}

func TestCreateRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memstore.New()
	doc := &runStatus{RunID: "r1", Status: "requested"}
	v, err := records.Create(ctx, s, "r1.json", doc)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Version != 1 {
		t.Fatalf("Create left counter at %d, want 1", doc.Version)
	}
	raw, _, _ := s.Get(ctx, "r1.json")
	if want := `{"version":1,"run_id":"r1","status":"requested","steps_completed":0}`; string(raw) != want {
		t.Fatalf("stored %s, want %s", raw, want)
	}
	got, gv, err := records.Read[runStatus](ctx, s, "r1.json")
	if err != nil || got != *doc || gv != v {
		t.Fatalf("Read = %+v %q %v, want %+v %q", got, gv, err, *doc, v)
	}
	again := &runStatus{RunID: "r1", Status: "queued"}
	if _, err := records.Create(ctx, s, "r1.json", again); !errors.Is(err, storage.ErrPreconditionFailed) || again.Version != 0 {
		t.Fatalf("second Create = %v (counter %d), want ErrPreconditionFailed and counter untouched", err, again.Version)
	}
	if _, _, err := records.Read[runStatus](ctx, s, "missing.json"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Read(missing) = %v", err)
	}
	if err := s.Delete(ctx, "bad.json", storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "bad.json", []byte("{"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := records.Read[runStatus](ctx, s, "bad.json"); err == nil {
		t.Fatal("Read of malformed JSON succeeded")
	}
}
