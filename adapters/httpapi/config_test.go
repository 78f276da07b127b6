package httpapi_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// TestConfigBuildsFeedAndWebhooks: the feed and the webhooks the Server
// builds from its Config are checked by New: the feed needs the store,
// routes need a secret, a route names a known agent.
func TestConfigBuildsFeedAndWebhooks(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	runner, err := run.NewRunner(run.Config{Store: store}, run.Agent{Slug: "echo", Steps: []run.Step{{Name: "say",
		Run: func(context.Context, run.StepInput) (run.StepOutput, error) { return run.StepOutput{}, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	route := []httpapi.WebhookRoute{{Source: "github", Event: "push", Agent: "echo"}}
	tests := []struct {
		name string
		cfg  httpapi.Config
		ok   bool
	}{
		{"feed", httpapi.Config{Runner: runner, Store: store, Events: true}, true},
		{"feed without a store", httpapi.Config{Runner: runner, Events: true}, false},
		{"webhooks", httpapi.Config{Runner: runner, Store: store, GitHubSecret: "s", WebhookRoutes: route}, true},
		{"routes without a secret", httpapi.Config{Runner: runner, Store: store, WebhookRoutes: route}, false},
		{"a route to no agent", httpapi.Config{Runner: runner, Store: store, GitHubSecret: "s",
			WebhookRoutes: []httpapi.WebhookRoute{{Source: "github", Event: "push", Agent: "nobody"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := httpapi.New(tt.cfg)
			if tt.ok && err != nil {
				t.Fatalf("New: %v", err)
			}
			if !tt.ok && !errors.Is(err, httpapi.ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
