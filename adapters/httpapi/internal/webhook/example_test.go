package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/webhook"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// Example routes GitHub's pull_request.opened to a reviewer agent: GitHub
// signs each delivery with the webhook's secret, the handler checks it,
// starts a run with trigger "event" and the delivery's fields as input, and
// answers a redelivery with the first answer.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New()
	quiet := slog.New(slog.DiscardHandler)
	inputs := make(chan string, 1)
	runner, _ := run.NewRunner(run.Config{Store: store, Logger: quiet}, run.Agent{
		Slug: "reviewer",
		Steps: []run.Step{{Name: "review", Idempotent: true, Run: func(_ context.Context, in run.StepInput) (run.StepOutput, error) {
			inputs <- string(in.Input)
			return run.StepOutput{Summary: "looks good"}, nil
		}}},
	})
	done := make(chan error)
	go func() { done <- runner.Run(ctx) }()
	defer func() { cancel(); <-done }()

	h, _ := webhook.New(webhook.Config{
		Runner: runner, Store: store, GitHubSecret: "It's a Secret to Everybody", Logger: quiet,
		Routes: []webhook.Route{{Source: "github", Event: "pull_request.opened", Agent: "reviewer"}},
	})
	mux := http.NewServeMux()
	mux.Handle("/webhooks/", h)
	srv := httptest.NewServer(mux) // 127.0.0.1
	defer srv.Close()

	// What GitHub sends.
	body := `{"action":"opened","number":42,"pull_request":{"number":42},"repository":{"full_name":"octo/hello"},"sender":{"login":"mona"}}`
	mac := hmac.New(sha256.New, []byte("It's a Secret to Everybody"))
	mac.Write([]byte(body))
	deliver := func() (int, map[string]any) {
		req, _ := http.NewRequest("POST", srv.URL+"/webhooks/github", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var answer map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		return resp.StatusCode, answer
	}

	status, answer := deliver()
	fmt.Println(status, answer["started"], answer["agent"])
	st, _ := runner.Wait(ctx, answer["run_id"].(string))
	fmt.Println(st.Status, st.Trigger, st.IdempotencyKey)
	fmt.Println("input:", <-inputs)

	status, again := deliver() // a redelivery
	fmt.Println(status, again["run_id"] == answer["run_id"])
	// Output:
	// 201 true reviewer
	// completed event github:72d3162e-cc78-11e3-81ab-4c9367dc0958
	// input: {"event":"pull_request","action":"opened","delivery":"72d3162e-cc78-11e3-81ab-4c9367dc0958","repository":"octo/hello","number":42,"sender":"mona"}
	// 201 true
}
