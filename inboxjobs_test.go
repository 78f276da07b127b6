package conveyor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
)

func inboxSub(id, action string) lifecycle.InboxSubmission {
	return lifecycle.InboxSubmission{ID: id, Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: action, Target: "notes/violin.pp.ua/sonata-bwv1001"}}
}

// An accepted entry whose action Config.InboxJobs maps enqueues one job of
// that type, linked both ways: the entry names the job, the job's payload
// the entry. Submitting it again (the id in use) and the retry pass
// enqueue nothing more; an action the mapping does not list starts none.
func TestInboxEntryStartsItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, conveyor.Config{JobTypes: greet, InboxJobs: map[string]lifecycle.JobType{"propose-edit": "GREET"}})
	e, err := c.Inbox().Submit(ctx, lifecycle.ActorGateway, inboxSub("inbox_2026-02-14_abc123", "propose-edit"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "inbox:inbox_2026-02-14_abc123"; e.JobID != want {
		t.Fatalf("entry names job %q, want %q", e.JobID, want)
	}
	job, err := c.Jobs().Job(ctx, e.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		InboxEntryID string `json:"inbox_entry_id"`
		Action       string `json:"action"`
		Target       string `json:"target"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if job.JobType != "GREET" || job.Status != lifecycle.JobQueued || p.InboxEntryID != e.ID || p.Action != "propose-edit" || p.Target != e.Intent.Target {
		t.Fatalf("job = %s %s, payload %+v; want a QUEUED GREET job naming the entry", job.JobType, job.Status, p)
	}

	if _, err := c.Inbox().Submit(ctx, lifecycle.ActorGateway, inboxSub(e.ID, "propose-edit")); !errors.Is(err, lifecycle.ErrInboxEntryExists) {
		t.Fatalf("second Submit: %v, want ErrInboxEntryExists", err)
	}
	plain, err := c.Inbox().Submit(ctx, lifecycle.ActorGateway, inboxSub("plain", "propose-summary"))
	if err != nil || plain.JobID != "" {
		t.Fatalf("unmapped entry = %+v, %v; want no job", plain, err)
	}
	if linked, err := c.Inbox().DispatchPending(ctx); err != nil || len(linked) != 0 {
		t.Fatalf("retry pass = %v, %v; want nothing to do", linked, err)
	}
	n := 0
	for _, err := range c.Jobs().List(ctx, lifecycle.ActorOrchestration) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

func TestInboxJobsConfig(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		cfg  conveyor.Config
		want error
	}{
		"unknown type": {conveyor.Config{InboxJobs: map[string]lifecycle.JobType{"propose-edit": "NOPE"}}, conveyor.ErrInvalidConfig},
		"NLM type":     {conveyor.Config{InboxJobs: map[string]lifecycle.JobType{"propose-edit": lifecycle.JobBrief}}, nil},
		"user type":    {conveyor.Config{JobTypes: greet, InboxJobs: map[string]lifecycle.JobType{"x": "GREET"}}, nil},
		"own dispatch": {conveyor.Config{Inbox: func() (c conveyor.Config) {
			c.Inbox.Dispatch = func(context.Context, lifecycle.InboxEntry) (string, error) { return "", nil }
			return c
		}().Inbox}, conveyor.ErrInvalidConfig},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Store = memstore.New()
			c, err := conveyor.New(tt.cfg)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("New: %v, want %v", err, tt.want)
			}
			if c != nil {
				_ = c.Stop(context.Background())
			}
		})
	}
}
