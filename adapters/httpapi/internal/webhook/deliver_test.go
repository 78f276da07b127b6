package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/webhook"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// A Deliver route hands a GitHub delivery to the runs waiting for it: each
// run of the route's agent parked on "github:{event}" resumes, its next
// step given the event (the delivery id, and the object a started run's
// input would be as payload), a run narrowed to the delivery's repository
// too; a redelivery finds none waiting and hands nothing; a run waiting
// for another event, or another repository's, is left alone.
func TestDeliverRouteResumesWaitingRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New()
	quiet := slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	seen := map[string]*run.ExternalEvent{}
	// The run waits for event, or for the event type its input names.
	wait := func(event string) run.Step {
		return run.Step{Name: "push", Run: func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
			e := event
			if len(in.Input) > 0 {
				_ = json.Unmarshal(in.Input, &e)
			}
			return run.StepOutput{Await: &run.Await{ExternalEvent: e}}, nil
		}}
	}
	after := run.Step{Name: "deploy", Run: func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
		mu.Lock()
		seen[in.RunID] = in.Event
		mu.Unlock()
		return run.StepOutput{}, nil
	}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 20 * time.Millisecond},
		run.Agent{Slug: "deployer", Machine: lifecycle.MachineApproval, Steps: []run.Step{wait("github:check_suite.completed"), after}},
		run.Agent{Slug: "other", Machine: lifecycle.MachineApproval, Steps: []run.Step{wait("github:push"), after}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(webhook.Config{Runner: runner, Store: store, GitHubSecret: ghSecret, Logger: quiet,
		Routes: []webhook.Route{{Source: "github", Event: "check_suite.completed", Agent: "deployer", Deliver: true}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(rctx) }()
	defer func() { stop(); <-ran }()
	parked := func(slug, waitsFor string) string {
		t.Helper()
		var input json.RawMessage
		if waitsFor != "" {
			input, _ = json.Marshal(waitsFor)
		}
		res, err := runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: slug, Input: input})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if st, err := runner.Wait(wctx, res.RunID); err != nil || st.Status != "waiting_external" {
			t.Fatalf("run of %s: %s %v", slug, st.Status, err)
		}
		return res.RunID
	}
	// Two runs wait for the event of any repository, one for octo/repo's
	// alone (narrowed), one for another repository's.
	a, b, c := parked("deployer", ""), parked("deployer", "github:check_suite.completed:octo/repo"), parked("other", "")
	elsewhere := parked("deployer", "github:check_suite.completed:octo/other")
	// Another tenant's run waits for the same event: the route acts for
	// the default tenant, so it is not handed the delivery (want: a, b).
	acme := lifecycle.WithTenant(ctx, "acme")
	theirs, err := runner.Submit(acme, lifecycle.SubmitRequest{AgentSlug: "deployer"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := runner.Wait(acme, theirs.RunID); err != nil || st.Status != "waiting_external" {
		t.Fatalf("acme's run: %s %v", st.Status, err)
	}
	post := func(id string) (int, map[string]any) {
		t.Helper()
		d := gh(id, "check_suite", `{"action":"completed","check_suite":{"conclusion":"success"},"repository":{"full_name":"octo/repo"},"sender":{"login":"mona"}}`)
		req, _ := http.NewRequest(d.method, srv.URL+d.path, bytes.NewReader(d.body))
		req.Header.Set("Content-Type", d.contentType)
		for k, v := range d.header {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	code, body := post("d-1")
	var got []string
	for _, v := range body["delivered"].([]any) {
		got = append(got, v.(string))
	}
	slices.Sort(got)
	want := []string{a, b}
	slices.Sort(want)
	if code != http.StatusOK || body["started"] != false || !slices.Equal(got, want) {
		t.Fatalf("delivery: %d %v, want 200 delivered to %v", code, body, want)
	}
	for _, id := range []string{a, b} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := runner.Wait(wctx, id)
		cancel()
		if err != nil || st.Status != "completed" {
			t.Fatalf("run %s after the delivery: %s %v", id, st.Status, err)
		}
		mu.Lock()
		ev := seen[id]
		mu.Unlock()
		var payload map[string]any
		if ev != nil {
			_ = json.Unmarshal(ev.Payload, &payload)
		}
		if ev == nil || !strings.HasPrefix(ev.Type, "github:check_suite.completed") || ev.ID != "d-1" || ev.Source != "github" ||
			payload["delivery"] != "d-1" || payload["repository"] != "octo/repo" || payload["action"] != "completed" {
			t.Errorf("run %s's next step was given %+v (payload %v)", id, ev, payload)
		}
	}
	if code, body := post("d-1"); code != http.StatusOK || body["delivered"] != nil {
		t.Errorf("redelivery: %d %v, want 200 delivered to none", code, body)
	}
	for _, id := range []string{c, elsewhere} {
		if st, err := runner.Status(ctx, id); err != nil || st.Status != "waiting_external" {
			t.Errorf("run %s, waiting for another event or repository: %s %v", id, st.Status, err)
		}
	}
}

// A Slack Deliver route hands an Events API event to the runs waiting for
// "slack:{event}", or for it in their channel ("slack:app_mention:C7"),
// the event's id and the object a started run's input would be with it;
// Slack is answered 200 with a line to show.
func TestSlackDeliverRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New()
	quiet := slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	seen := map[string]*run.ExternalEvent{}
	agent := run.Agent{Slug: "listener", Machine: lifecycle.MachineApproval, Steps: []run.Step{
		{Name: "ask", Run: func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
			var e string
			_ = json.Unmarshal(in.Input, &e)
			return run.StepOutput{Await: &run.Await{ExternalEvent: e}}, nil
		}},
		{Name: "answer", Run: func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
			mu.Lock()
			seen[in.RunID] = in.Event
			mu.Unlock()
			return run.StepOutput{}, nil
		}}}}
	runner, err := run.NewRunner(run.Config{Store: store, Logger: quiet, PollInterval: 20 * time.Millisecond}, agent)
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(webhook.Config{Runner: runner, Store: store, SlackSigningSecret: slackSecret, Logger: quiet,
		Routes: []webhook.Route{{Source: "slack", Event: "app_mention", Agent: "listener", Deliver: true}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(rctx) }()
	defer func() { stop(); <-ran }()
	parked := func(waitsFor string) string {
		t.Helper()
		input, _ := json.Marshal(waitsFor)
		res, err := runner.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "listener", Input: input})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if st, err := runner.Wait(wctx, res.RunID); err != nil || st.Status != "waiting_external" {
			t.Fatalf("run waiting for %s: %s %v", waitsFor, st.Status, err)
		}
		return res.RunID
	}
	anyChan, inC7, inC9 := parked("slack:app_mention"), parked("slack:app_mention:C7"), parked("slack:app_mention:C9")
	d := slackEvent(time.Now(), "Ev1", "app_mention")
	req, _ := http.NewRequest(d.method, srv.URL+d.path, bytes.NewReader(d.body))
	req.Header.Set("Content-Type", d.contentType)
	for k, v := range d.header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body["delivered"].([]any)) != 2 || body["text"] != "Handed to 2 waiting run(s)." {
		t.Fatalf("delivery: %d %v", resp.StatusCode, body)
	}
	for _, id := range []string{anyChan, inC7} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := runner.Wait(wctx, id)
		cancel()
		if err != nil || st.Status != "completed" {
			t.Fatalf("run %s after the delivery: %s %v", id, st.Status, err)
		}
		mu.Lock()
		ev := seen[id]
		mu.Unlock()
		var payload map[string]any
		if ev != nil {
			_ = json.Unmarshal(ev.Payload, &payload)
		}
		if ev == nil || ev.ID != "Ev1" || ev.Source != "slack" || payload["channel_id"] != "C7" || payload["event_type"] != "app_mention" {
			t.Errorf("run %s's next step was given %+v (payload %v)", id, ev, payload)
		}
	}
	if st, err := runner.Status(ctx, inC9); err != nil || st.Status != "waiting_external" {
		t.Errorf("the run waiting in another channel: %s %v", st.Status, err)
	}
}
