package machine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Fire reports the transition context its ctx carries in both kinds of
// refusal, as a copy; without one the errors carry none.
func TestFireReportsTransitionContext(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)
	tc := lifecycle.TransitionContext{RunID: "run_1", UserID: "u-42", Initiator: lifecycle.InitiatorUser, Timestamp: at,
		Metadata: map[string]string{"ticket": "T-1"}}
	ctx := machine.WithTransition(context.Background(), tc)
	m := machine.ApprovalRun()
	tests := []struct {
		name  string
		from  machine.ApprovalRunState
		event lifecycle.Event
		actor lifecycle.Actor
		ctx   context.Context
		want  *lifecycle.TransitionContext
	}{
		{"terminal", machine.ApprovalCompleted, machine.EventApprove, lifecycle.ActorGateway, ctx, &tc},
		{"no such move", machine.ApprovalPending, machine.EventApprove, lifecycle.ActorGateway, ctx, &tc},
		{"forbidden actor", machine.ApprovalAwaitingApproval, machine.EventApprove, lifecycle.ActorMastra, ctx, &tc},
		{"no context", machine.ApprovalCompleted, machine.EventApprove, lifecycle.ActorGateway, context.Background(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := m.Fire(tt.ctx, &record{Status: string(tt.from)}, tt.event, tt.actor)
			var (
				got *lifecycle.TransitionContext
				ite *lifecycle.InvalidTransitionError
				fae *lifecycle.ForbiddenActorError
			)
			switch {
			case errors.As(err, &ite):
				got = ite.Context
			case errors.As(err, &fae):
				got = fae.Context
			default:
				t.Fatalf("Fire: %v", err)
			}
			if (got == nil) != (tt.want == nil) {
				t.Fatalf("context %+v, want %+v", got, tt.want)
			}
			if got == nil {
				if strings.Contains(err.Error(), "[") {
					t.Errorf("message %q names a context", err)
				}
				return
			}
			if got == &tc || got.RunID != "run_1" || got.UserID != "u-42" || got.Initiator != "user" || !got.Timestamp.Equal(at) || got.Metadata["ticket"] != "T-1" {
				t.Errorf("context %+v", got)
			}
			want := "[run run_1, user u-42, initiator user, at 2026-02-14T08:00:00Z]"
			if !strings.HasSuffix(err.Error(), want) {
				t.Errorf("message %q, want it to end %q", err, want)
			}
		})
	}
}

func TestTransitionContextCheck(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range codes.MaxListLen + 1 {
		many[strings.Repeat("k", 1+i%200)+string(rune('a'+i/200))] = "v"
	}
	tests := []struct {
		name  string
		tc    lifecycle.TransitionContext
		field string
		code  string
	}{
		{"zero", lifecycle.TransitionContext{}, "", ""},
		{"full", lifecycle.TransitionContext{UserID: strings.Repeat("u", codes.MaxNameBytes), Initiator: lifecycle.InitiatorWebhook,
			Metadata: map[string]string{"why": "line one\nline two\t" + strings.Repeat("x", codes.MaxTextBytes-18)}}, "", ""},
		{"every initiator", lifecycle.TransitionContext{Initiator: lifecycle.InitiatorTimeout}, "", ""},
		{"user id too long", lifecycle.TransitionContext{UserID: strings.Repeat("u", codes.MaxNameBytes+1)}, "user_id", codes.InputTooLarge},
		{"user id with a tab", lifecycle.TransitionContext{UserID: "u\t1"}, "user_id", codes.InvalidInput},
		{"unknown initiator", lifecycle.TransitionContext{Initiator: "cron"}, "initiator", codes.InvalidInput},
		{"initiator not UTF-8", lifecycle.TransitionContext{Initiator: "\xff"}, "initiator", codes.InvalidInput},
		{"empty metadata key", lifecycle.TransitionContext{Metadata: map[string]string{"": "v"}}, "metadata", codes.InvalidInput},
		{"metadata key too long", lifecycle.TransitionContext{Metadata: map[string]string{strings.Repeat("k", codes.MaxNameBytes+1): "v"}}, "metadata key", codes.InputTooLarge},
		{"metadata value with NUL", lifecycle.TransitionContext{Metadata: map[string]string{"k": "a\x00b"}}, "metadata[k]", codes.InvalidInput},
		{"too many entries", lifecycle.TransitionContext{Metadata: many}, "metadata", codes.InputTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := codes.CheckContext(&tt.tc)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var ie *lifecycle.InputError
			if !errors.As(err, &ie) || ie.Field != tt.field || lifecycle.ErrorCode(err) != tt.code {
				t.Errorf("Check: %v (code %s), want field %s, code %s", err, lifecycle.ErrorCode(err), tt.field, tt.code)
			}
		})
	}
}
