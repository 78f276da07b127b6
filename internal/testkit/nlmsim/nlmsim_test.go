package nlmsim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/testkit/nlmsim"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAnswers: the stages and the job handler answer each job type after
// the pause, with content its artifact type accepts, and stop at their
// context's end.
func TestAnswers(t *testing.T) {
	const pause = time.Minute
	for _, jt := range []lifecycle.JobType{lifecycle.JobResearch, lifecycle.JobBrief, lifecycle.JobProposalPreprocess} {
		at, _ := artifact.TypeForJob(jt)
		for _, via := range []string{"stages", "handlers"} {
			t.Run(string(jt)+" "+via, func(t *testing.T) {
				clk := clock.NewFake(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
				start := clk.Now()
				answer := func(ctx context.Context) ([]byte, error) {
					if via == "stages" {
						return nlmsim.Stages(clk, pause).Query(ctx, lifecycle.NLMRequest{JobType: jt, Query: "q"}, "")
					}
					out, err := nlmsim.Handlers(clk, pause).CallNotebookLM(ctx, lifecycle.Job{JobID: "j", JobType: jt}, nil)
					return out.Content, err
				}
				got := make(chan error, 1)
				go func() {
					b, err := answer(context.Background())
					if err == nil {
						err = artifact.ValidateContent(at, b)
					}
					got <- err
				}()
				select {
				case <-clk.WaitForTimers(1):
				case <-time.After(time.Minute):
					t.Fatal("no answer waits on the clock")
				}
				if _, _, err := clk.AdvanceToNext(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("answer: %v", err)
				}
				if waited := clk.Now().Sub(start); waited != pause {
					t.Errorf("answered after %s, want %s", waited, pause)
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if _, err := answer(ctx); err == nil {
					t.Error("answered on an ended context")
				}
			})
		}
	}
}

// TestPoster: the callbacks carry the nlm-backend's first token when the
// tokens have one, else the actor header.
func TestPoster(t *testing.T) {
	tests := []struct {
		name             string
		tokens           map[string]lifecycle.Actor
		wantAuth, wantAs string
	}{
		{"no tokens", nil, "", "nlm-backend"},
		{"no nlm token", map[string]lifecycle.Actor{"g": lifecycle.ActorGateway}, "", "nlm-backend"},
		{"first nlm token", map[string]lifecycle.Actor{"g": lifecycle.ActorGateway, "n2": lifecycle.ActorNLMBackend, "n1": lifecycle.ActorNLMBackend},
			"Bearer n1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var auth, as string
			srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				auth, as = r.Header.Get("Authorization"), r.Header.Get("X-Conveyor-Actor")
			}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
			resp, err := nlmsim.Poster(tt.tokens).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if auth != tt.wantAuth || as != tt.wantAs {
				t.Errorf("Authorization %q, X-Conveyor-Actor %q; want %q, %q", auth, as, tt.wantAuth, tt.wantAs)
			}
		})
	}
}
