package machine

import (
	"github.com/runconveyor/conveyor/lifecycle"

	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/qmuntal/stateless"
)

// Change describes a transition [Machine.Fire] made.
type Change[S ~string] struct {
	From  S
	To    S
	Event lifecycle.Event
	Actor lifecycle.Actor
}

// firing is what one Fire call hands to the shared stateless engine through
// its context, so a single engine serves every record concurrently. It is
// that context itself (the caller's, with one value more), one allocation
// where context.WithValue and the value would be two.
type firing[R any] struct {
	context.Context
	rec   R
	actor lifecycle.Actor
}

type firingKey struct{}

// Value is the firing under firingKey, the caller's context's values
// otherwise.
func (f *firing[R]) Value(key any) any {
	if _, ok := key.(firingKey); ok {
		return f
	}
	return f.Context.Value(key)
}

func firingFrom[R any](ctx context.Context) *firing[R] {
	return ctx.Value(firingKey{}).(*firing[R])
}

// buildEngine configures stateless from the table, the only place the
// machine is described to it. Actor checks are guards like any other.
func (m *Machine[S, R]) buildEngine() *stateless.StateMachine {
	sm := stateless.NewStateMachineWithExternalStorage(
		func(ctx context.Context) (stateless.State, error) {
			s := m.def.GetState(firingFrom[R](ctx).rec)
			if i := m.tab.find(string(s)); i >= 0 {
				return m.boxed[i], nil // a string in an interface would be allocated on every Fire
			}
			return s, nil
		},
		func(ctx context.Context, s stateless.State) error {
			m.def.SetState(firingFrom[R](ctx).rec, s.(S))
			return nil
		},
		// Immediate mode keeps no queue of its own, so concurrent Fire calls
		// on different records never share state inside the engine.
		stateless.FiringImmediate,
	)
	for _, t := range m.def.Transitions {
		guards := []stateless.GuardFunc{func(ctx context.Context, _ ...any) bool {
			return slices.Contains(t.Actors, firingFrom[R](ctx).actor)
		}}
		if t.Guard != nil {
			allow := t.Guard.Allow
			guards = append(guards, func(ctx context.Context, _ ...any) bool {
				return allow(firingFrom[R](ctx).rec)
			})
		}
		if t.From == t.To {
			sm.Configure(t.From).PermitReentry(t.Event, guards...)
		} else {
			sm.Configure(t.From).Permit(t.Event, t.To, guards...)
		}
	}
	for _, s := range m.def.States {
		sm.Configure(s) // every state known to the engine, so none is added while firing
	}
	sm.OnUnhandledTrigger(func(ctx context.Context, state stateless.State, trigger stateless.Trigger, _ []string) error {
		return m.refusal(firingFrom[R](ctx), state.(S), trigger.(lifecycle.Event))
	})
	return sm
}

// Fire moves rec along the transition that event triggers from rec's current
// state, if actor may make it and its guard allows rec. On success rec's
// state has changed (through SetState) and the Change says how. On failure
// rec is untouched and the error is an [*InvalidTransitionError] (no such
// move, terminal or unknown state, or a guard refused) or a
// [*ForbiddenActorError], carrying the [TransitionContext] that ctx holds
// (see [WithTransition]).
func (m *Machine[S, R]) Fire(ctx context.Context, rec R, event lifecycle.Event, actor lifecycle.Actor) (change Change[S], err error) {
	defer func() {
		if err != nil {
			withContext(err, transitionOf(ctx))
		}
	}()
	if err := ctx.Err(); err != nil {
		return Change[S]{}, err
	}
	if isNil(rec) {
		return Change[S]{}, ErrNilRecord
	}
	from := m.def.GetState(rec)
	if !m.IsState(from) {
		return Change[S]{}, m.invalid(from, "", event, nil)
	}
	defer func() {
		// stateless panics when two guarded transitions both allow a record:
		// a flaw in the table's guards, reported rather than crashing the caller.
		if p := recover(); p != nil {
			err = &DefinitionError{Machine: m.def.Name, Problem: fmt.Sprintf("firing %q from %q: %v", event, from, p)}
		}
	}()
	if err := m.engine.FireCtx(&firing[R]{Context: ctx, rec: rec, actor: actor}, event); err != nil {
		return Change[S]{}, err
	}
	return Change[S]{From: from, To: m.def.GetState(rec), Event: event, Actor: actor}, nil
}

// refusal explains why stateless found no permitted transition.
func (m *Machine[S, R]) refusal(f *firing[R], from S, event lifecycle.Event) error {
	var candidates []Transition[S, R]
	for _, t := range m.def.Transitions {
		if t.From == from && t.Event == event {
			candidates = append(candidates, t)
		}
	}
	if len(candidates) == 0 {
		return m.invalid(from, "", event, nil)
	}
	var unmet []string
	for _, t := range candidates {
		if t.Guard == nil || t.Guard.Allow(f.rec) {
			// The move exists and its guard allows it: only the actor is wrong.
			return m.forbidden(t, f.actor)
		}
		unmet = append(unmet, t.Guard.Name)
	}
	return m.invalid(from, "", event, unmet)
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// withContext puts tc into a refusal Fire returns.
func withContext(err error, tc *lifecycle.TransitionContext) {
	if tc == nil {
		return
	}
	c := *tc
	var (
		ite *lifecycle.InvalidTransitionError
		fae *lifecycle.ForbiddenActorError
	)
	switch {
	case errors.As(err, &ite):
		ite.Context = &c
	case errors.As(err, &fae):
		fae.Context = &c
	}
}
