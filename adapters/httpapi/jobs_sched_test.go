package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

var schedT0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

// claimOrder claims and runs the rig's jobs as a Worker would, moving the
// fake clock on 10 s whenever none is ready, until n have started,
// and returns their ids in the order they started.
func claimOrder(t *testing.T, g *rig, clk *clock.Fake, n int) []string {
	t.Helper()
	ctx := context.Background()
	// Off the whole second: a batch's jobs are ready a nanosecond apart,
	// so a step landing on their time exactly would find only the first.
	clk.Advance(time.Microsecond)
	var got []string
	for tries := 0; len(got) < n && tries < 10000; tries++ {
		c, err := g.queue.Claim(ctx, "w")
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			clk.Advance(10 * time.Second)
			continue
		}
		got = append(got, c.Job().JobID)
		h := jobqueue.Handlers{CallNotebookLM: func(context.Context, lifecycle.Job, json.RawMessage) (lifecycle.JobOutput, error) {
			return lifecycle.JobOutput{Content: json.RawMessage(`{"title":"t","body":"b","entity_map":{},"word_count":1}`)}, nil
		}}
		if j, err := c.Run(ctx, h); err != nil || j.Status != lifecycle.JobComplete {
			t.Fatalf("%s ran to %s, %v", c.Job().JobID, j.Status, err)
		}
	}
	return got
}

// TestJobScheduleOverHTTP: POST /jobs takes run_at, delay and priority;
// a delayed job is answered QUEUED with its scheduled_at and starts no
// earlier; a higher priority sent later starts first; the Go client sends
// the same fields.
func TestJobScheduleOverHTTP(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(schedT0)
	g := newRig(t, rigOpts{clock: clk})
	post := func(body string) lifecycle.Job {
		t.Helper()
		status, _, b := g.raw("POST", "/jobs", "tok-gateway", "application/json", []byte(body), nil)
		if status != 201 {
			t.Fatalf("POST /jobs %s: %d %s", body, status, b)
		}
		var j lifecycle.Job
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	late := post(`{"job_id":"late","job_type":"BRIEF","agent_slug":"a","delay":"1h","priority":9}`)
	if late.Status != lifecycle.JobQueued || late.ScheduledAt == nil || !late.ScheduledAt.Equal(schedT0.Add(time.Hour)) || late.Priority != 9 {
		t.Fatalf("delayed job answered %s, scheduled_at %v, priority %d", late.Status, late.ScheduledAt, late.Priority)
	}
	at := post(`{"job_id":"at","job_type":"BRIEF","agent_slug":"a","run_at":"2026-02-24T10:30:00Z"}`)
	if at.ScheduledAt == nil || !at.ScheduledAt.Equal(schedT0.Add(30*time.Minute)) || at.Priority != 0 {
		t.Fatalf("run_at job answered scheduled_at %v, priority %d", at.ScheduledAt, at.Priority)
	}
	post(`{"job_id":"low","job_type":"BRIEF","agent_slug":"a","priority":2}`)
	clk.Advance(time.Millisecond)
	post(`{"job_id":"high","job_type":"BRIEF","agent_slug":"a","priority":8}`) // later, higher: first
	// The Go client: a delay by the server's clock, a priority.
	ctx := context.Background()
	cj, err := g.client(lifecycle.ActorGateway).Enqueue(ctx, lifecycle.NewJob{JobID: "client", JobType: lifecycle.JobBrief, AgentSlug: "a", Delay: 45 * time.Minute, Priority: 4})
	if err != nil || cj.ScheduledAt == nil || !cj.ScheduledAt.Equal(clk.Now().Add(45*time.Minute)) || cj.Priority != 4 {
		t.Fatalf("client Enqueue: %+v, %v", cj, err)
	}
	if got, _ := g.client(lifecycle.ActorAdmin).Job(ctx, "late"); got.ScheduledAt == nil || got.Priority != 9 {
		t.Fatalf("GET /jobs/late: scheduled_at %v, priority %d", got.ScheduledAt, got.Priority)
	}
	want := []string{"high", "low", "at", "client", "late"}
	if got := claimOrder(t, g, clk, len(want)); !slices.Equal(got, want) {
		t.Fatalf("started %v, want %v", got, want)
	}
	if clk.Now().Before(schedT0.Add(time.Hour)) {
		t.Fatalf("the job delayed 1 h started at %v", clk.Now())
	}
}

// TestJobScheduleRefusedOverHTTP: a delay that is not a Go duration, a
// negative one, a priority outside 1..9 and a run_at that is not RFC 3339
// are 400, naming the field, and write nothing; in a batch, naming the job.
func TestJobScheduleRefusedOverHTTP(t *testing.T) {
	t.Parallel()
	g := newRig(t, rigOpts{clock: clock.NewFake(schedT0)})
	tests := []struct {
		name, field, value string
		code               string
		index              int // in a batch: the job named, -1 none (the body does not decode)
	}{
		{"delay not a duration", "delay", `"soon"`, codes.InvalidRequest, 1},
		{"delay a number", "delay", `60`, codes.InvalidRequest, -1},
		{"negative delay", "delay", `"-5s"`, codes.InvalidRequest, 1},
		{"priority 10", "priority", `10`, codes.InvalidRequest, 1},
		{"priority -1", "priority", `-1`, codes.InvalidRequest, 1},
		{"run_at not RFC 3339", "run_at", `"tomorrow"`, codes.InvalidRequest, -1},
	}
	for _, tt := range tests {
		before := g.snapshot()
		body := fmt.Sprintf(`{"job_type":"BRIEF","agent_slug":"a",%q:%s}`, tt.field, tt.value)
		status, _, b := g.raw("POST", "/jobs", "tok-gateway", "application/json", []byte(body), nil)
		var e struct{ Code, Message string }
		_ = json.Unmarshal(b, &e)
		if status != 400 || e.Code != tt.code {
			t.Errorf("%s: %d %s, want 400 %s", tt.name, status, b, tt.code)
		}
		batch := fmt.Sprintf(`{"jobs":[{"job_type":"BRIEF","agent_slug":"a"},%s]}`, body)
		status, _, b = g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(batch), nil)
		var be batchAnswer
		_ = json.Unmarshal(b, &be)
		index := -1
		if be.Index != nil {
			index = *be.Index
		}
		if status != 400 || be.Code != tt.code || index != tt.index {
			t.Errorf("%s in a batch: %d %s, want 400 %s naming job %d", tt.name, status, b, tt.code, tt.index)
		}
		if d := diffSnapshots(before, g.snapshot()); d != "" {
			t.Errorf("%s wrote: %s", tt.name, d)
		}
	}
}

// TestJobBatchScheduleOverHTTP: POST /jobs/batch takes each job's
// priority, run_at and delay; the Go client's EnqueueMany too.
func TestJobBatchScheduleOverHTTP(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(schedT0)
	g := newRig(t, rigOpts{clock: clk})
	body := `{"jobs":[
		{"job_id":"d1","job_type":"BRIEF","agent_slug":"a","delay":"10m"},
		{"job_id":"now","job_type":"BRIEF","agent_slug":"a"},
		{"job_id":"d2","job_type":"BRIEF","agent_slug":"a","run_at":"2026-02-24T10:10:00Z"},
		{"job_id":"p9","job_type":"BRIEF","agent_slug":"a","priority":9,"delay":"10m"}]}`
	status, _, b := g.raw("POST", "/jobs/batch", "tok-gateway", "application/json", []byte(body), nil)
	if status != 201 {
		t.Fatalf("POST /jobs/batch: %d %s", status, b)
	}
	jobs, err := g.client(lifecycle.ActorGateway).EnqueueMany(context.Background(), []lifecycle.NewJob{
		{JobID: "c-low", JobType: lifecycle.JobBrief, AgentSlug: "a", Priority: 1},
		{JobID: "c-late", JobType: lifecycle.JobBrief, AgentSlug: "a", Priority: 6, RunAt: schedT0.Add(20 * time.Minute)},
	})
	if err != nil || len(jobs) != 2 || jobs[0].Priority != 1 || jobs[1].ScheduledAt == nil {
		t.Fatalf("client EnqueueMany: %+v, %v", jobs, err)
	}
	want := []string{"now", "c-low", "p9", "d1", "d2", "c-late"}
	if got := claimOrder(t, g, clk, len(want)); !slices.Equal(got, want) {
		t.Fatalf("started %v, want %v", got, want)
	}
}
