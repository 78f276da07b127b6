package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestUniqueJobOverHTTP: a unique job posted twice in its period exists
// once: the first POST /jobs answers 201, the second 200 with the same job
// and "duplicate": true; the Go client and POST /jobs/batch say the same;
// a period that is not a duration, and a unique job with an id of its
// own, are 400 and write nothing.
func TestUniqueJobOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newRig(t, rigOpts{clock: clock.NewFake(schedT0)})
	post := func(path, body string, want int) []byte {
		t.Helper()
		status, _, b := g.raw("POST", path, "tok-gateway", "application/json", []byte(body), nil)
		if status != want {
			t.Fatalf("POST %s %s: %d %s, want %d", path, body, status, b, want)
		}
		return b
	}
	decode := func(b []byte) lifecycle.Job {
		t.Helper()
		var j lifecycle.Job
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	jobKeys := func() int {
		n := 0
		for k := range g.snapshot() {
			if strings.HasPrefix(k, "jobs/") {
				n++
			}
		}
		return n
	}
	first := decode(post("/jobs", `{"job_type":"BRIEF","agent_slug":"a","payload":{"x":1,"y":[2]},"unique":{"period":"1h"}}`, 201))
	if first.Duplicate || !strings.HasPrefix(first.JobID, "u-") {
		t.Fatalf("first: %+v", first)
	}
	second := decode(post("/jobs", `{"job_type":"BRIEF","agent_slug":"a","payload":{ "y":[2], "x":1 },"unique":{"period":"1h"}}`, 200))
	if !second.Duplicate || second.JobID != first.JobID {
		t.Fatalf("second: %s duplicate %v, want %s duplicate", second.JobID, second.Duplicate, first.JobID)
	}
	cj, err := g.client(lifecycle.ActorGateway).Enqueue(ctx, lifecycle.NewJob{JobType: lifecycle.JobBrief, AgentSlug: "a",
		Payload: json.RawMessage(`{"x":1,"y":[2]}`), Unique: &lifecycle.Unique{Period: time.Hour}})
	if err != nil || !cj.Duplicate || cj.JobID != first.JobID {
		t.Fatalf("client Enqueue: %s duplicate %v, %v", cj.JobID, cj.Duplicate, err)
	}
	if n := jobKeys(); n != 1 {
		t.Fatalf("%d job records, want 1", n)
	}
	var batch struct{ Jobs []lifecycle.Job }
	b := post("/jobs/batch", `{"jobs":[{"job_type":"BRIEF","agent_slug":"a","unique":{"key":"k"}},{"job_type":"BRIEF","agent_slug":"a","unique":{"key":"k"}},
		{"job_type":"BRIEF","agent_slug":"a","payload":{"x":1,"y":[2]},"unique":{"period":"1h"}}]}`, 201)
	if err := json.Unmarshal(b, &batch); err != nil || len(batch.Jobs) != 3 {
		t.Fatalf("batch answer %s, %v", b, err)
	}
	if j := batch.Jobs; j[0].Duplicate || !j[1].Duplicate || j[1].JobID != j[0].JobID || !j[2].Duplicate || j[2].JobID != first.JobID {
		t.Fatalf("batch answers %+v", j)
	}
	if n := jobKeys(); n != 2 {
		t.Fatalf("%d job records after the batch, want 2", n)
	}
	for _, body := range []string{
		`{"job_type":"BRIEF","agent_slug":"a","unique":{"period":"soon"}}`,
		`{"job_id":"mine","job_type":"BRIEF","agent_slug":"a","unique":{}}`,
		`{"job_type":"BRIEF","agent_slug":"a","unique":{"states":["NAPPING"]}}`,
	} {
		post("/jobs", body, 400)
	}
	if n := jobKeys(); n != 2 {
		t.Fatalf("%d job records after the refusals, want 2", n)
	}
}
