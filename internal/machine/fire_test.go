package machine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

func TestFireMovesTheRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := machine.CanonicalRun()
	run := &record{RunID: "run_1", Status: string(machine.RunRequested)}
	steps := []struct {
		event lifecycle.Event
		to    machine.RunState
	}{
		{machine.EventAdmit, machine.RunQueued},
		{machine.EventStart, machine.RunRunning},
		{machine.EventStepCompleted, machine.RunRunning},
		{machine.EventStepCompleted, machine.RunRunning},
		{machine.EventComplete, machine.RunCompleted},
	}
	for _, st := range steps {
		from := machine.RunState(run.Status)
		change, err := m.Fire(ctx, run, st.event, lifecycle.ActorOrchestration)
		if err != nil {
			t.Fatalf("fire %q from %q: %v", st.event, from, err)
		}
		want := machine.Change[machine.RunState]{From: from, To: st.to, Event: st.event, Actor: lifecycle.ActorOrchestration}
		if diff := cmp.Diff(want, change); diff != "" {
			t.Errorf("change (-want +got):\n%s", diff)
		}
		if run.Status != string(st.to) {
			t.Errorf("status %q, want %q", run.Status, st.to)
		}
	}
}

func TestFireRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		from      machine.CancelableRunState
		event     lifecycle.Event
		actor     lifecycle.Actor
		wantIs    []error
		wantNotIs []error
		unknown   string // the state InvalidTransitionError.Unknown names
		wantMsg   []string
		wantCode  string
	}{
		{
			name: "no such event here", from: machine.CancelableQueued, event: machine.EventSucceed, actor: lifecycle.ActorOrchestration,
			wantIs:    []error{lifecycle.ErrInvalidTransition},
			wantNotIs: []error{lifecycle.ErrTerminalState, lifecycle.ErrForbiddenActor},
			wantMsg:   []string{"cancelable-run", `"queued"`, `"succeed"`, "valid next states: running, canceled"},
			wantCode:  codes.InvalidTransition,
		},
		{
			name: "terminal", from: machine.CancelableSucceeded, event: machine.EventFail, actor: lifecycle.ActorOrchestration,
			wantIs:   []error{lifecycle.ErrInvalidTransition, lifecycle.ErrTerminalState},
			wantMsg:  []string{`"succeeded" is a terminal state`, "no valid next states"},
			wantCode: codes.TerminalState,
		},
		{
			name: "unknown state", from: "bogus", event: machine.EventStart, actor: lifecycle.ActorOrchestration,
			wantIs: []error{lifecycle.ErrInvalidTransition}, unknown: "bogus",
			wantMsg: []string{`unknown state "bogus"`},
		},
		{
			name: "mastra never writes status", from: machine.CancelableRunning, event: machine.EventSucceed, actor: lifecycle.ActorMastra,
			wantIs:    []error{lifecycle.ErrForbiddenActor},
			wantNotIs: []error{lifecycle.ErrInvalidTransition},
			wantMsg:   []string{`actor "mastra"`, `"running" to "succeeded"`, "allowed: orchestration"},
			wantCode:  codes.Forbidden,
		},
		{
			name: "frontend cannot cancel", from: machine.CancelableRunning, event: machine.EventRequestCancel, actor: lifecycle.ActorFrontend,
			wantIs:  []error{lifecycle.ErrForbiddenActor},
			wantMsg: []string{"allowed: gateway, orchestration"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := &record{Status: string(tt.from)}
			_, err := machine.CancelableRun().Fire(ctx, run, tt.event, tt.actor)
			if err == nil {
				t.Fatal("fire succeeded")
			}
			if run.Status != string(tt.from) {
				t.Errorf("refused fire changed the status to %q", run.Status)
			}
			for _, target := range tt.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("%v does not match %v", err, target)
				}
			}
			for _, target := range tt.wantNotIs {
				if errors.Is(err, target) {
					t.Errorf("%v matches %v", err, target)
				}
			}
			var ite *lifecycle.InvalidTransitionError
			if errors.As(err, &ite) && ite.Unknown != tt.unknown {
				t.Errorf("%v names the unknown state %q, want %q", err, ite.Unknown, tt.unknown)
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q lacks %q", err, s)
				}
			}
			var coder interface{ Code() string }
			if tt.wantCode != "" && (!errors.As(err, &coder) || coder.Code() != tt.wantCode) {
				t.Errorf("code of %v is not %s", err, tt.wantCode)
			}
		})
	}
}

func TestInvalidTransitionErrorFields(t *testing.T) {
	t.Parallel()
	err := machine.CanonicalRun().Check(machine.RunQueued, machine.RunRequested)
	var ite *lifecycle.InvalidTransitionError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &ite) {
		t.Fatalf("%v is not an *InvalidTransitionError", err)
	}
	want := &lifecycle.InvalidTransitionError{
		Machine: "canonical-run", From: "queued", To: "requested",
		ValidNext: []string{"running", "failed"},
	}
	if diff := cmp.Diff(want, ite); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := ite.Error(); got != `canonical-run: invalid transition from "queued" to "requested" (valid next states: running, failed)` {
		t.Errorf("message %q", got)
	}
}

func TestCheckActor(t *testing.T) {
	t.Parallel()
	m := machine.CanonicalRun()
	if err := m.CheckActor(machine.RunRequested, machine.RunFailed, lifecycle.ActorGateway); err != nil {
		t.Errorf("gateway may fail a requested run: %v", err)
	}
	if err := m.CheckActor(machine.RunRunning, machine.RunCompleted, lifecycle.ActorGateway); !errors.Is(err, lifecycle.ErrForbiddenActor) {
		t.Errorf("gateway completing a run: %v", err)
	}
	if err := m.CheckActor(machine.RunCompleted, machine.RunRunning, lifecycle.ActorOrchestration); !errors.Is(err, lifecycle.ErrTerminalState) {
		t.Errorf("leaving completed: %v", err)
	}
}

func TestFireNilRecordAndCanceledContext(t *testing.T) {
	t.Parallel()
	if _, err := machine.CanonicalRun().Fire(context.Background(), nil, machine.EventAdmit, lifecycle.ActorOrchestration); !errors.Is(err, machine.ErrNilRecord) {
		t.Errorf("nil record: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run := &record{Status: "requested"}
	if _, err := machine.CanonicalRun().Fire(ctx, run, machine.EventAdmit, lifecycle.ActorOrchestration); !errors.Is(err, context.Canceled) || run.Status != "requested" {
		t.Errorf("canceled context: %v, status %q", err, run.Status)
	}
}

// TestFireOverlappingGuards shows a table whose guards both allow a record is
// reported as a definition error, not a panic.
func TestFireOverlappingGuards(t *testing.T) {
	t.Parallel()
	yes := &machine.Guard[*lamp]{Name: "yes", Allow: func(*lamp) bool { return true }}
	who := []lifecycle.Actor{lifecycle.ActorSystem}
	def := lampDef()
	def.Transitions = []machine.Transition[light, *lamp]{
		{From: "off", To: "on", Event: "kick", Actors: who, Guard: yes},
		{From: "off", To: "broken", Event: "kick", Actors: who, Guard: yes},
	}
	m, err := machine.New(def)
	if err != nil {
		t.Fatal(err)
	}
	l := &lamp{state: "off"}
	_, err = m.Fire(context.Background(), l, "kick", lifecycle.ActorSystem)
	if !errors.Is(err, machine.ErrInvalidDefinition) || l.state != "off" {
		t.Errorf("overlapping guards: %v, state %q", err, l.state)
	}
}

// TestFireConcurrently fires on many records at once through the one shared
// engine; -race proves the records do not interfere.
func TestFireConcurrently(t *testing.T) {
	t.Parallel()
	m := machine.CancelableRun()
	runs := make([]*record, 64)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i] = &record{Status: "queued"}
		wg.Go(func() {
			ctx := context.Background()
			events := []lifecycle.Event{machine.EventStart, machine.EventRequestCancel, machine.EventCancel}
			if i%2 == 0 {
				events = []lifecycle.Event{machine.EventStart, machine.EventSucceed}
			}
			for _, e := range events {
				if _, err := m.Fire(ctx, runs[i], e, lifecycle.ActorOrchestration); err != nil {
					t.Errorf("run %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	for i, r := range runs {
		want := "canceled"
		if i%2 == 0 {
			want = "succeeded"
		}
		if r.Status != want {
			t.Errorf("run %d ended %q, want %q", i, r.Status, want)
		}
	}
}
