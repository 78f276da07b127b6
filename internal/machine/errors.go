package machine

import (
	"github.com/runconveyor/conveyor/lifecycle"

	"context"
	"errors"
	"fmt"
)

var (
	// ErrInvalidDefinition: a machine definition that [New] refuses.
	ErrInvalidDefinition = errors.New("invalid machine definition")
	// ErrNilRecord is returned by [Machine.Fire] for a nil record.
	ErrNilRecord = errors.New("lifecycle: nil record")
)

// DefinitionError reports why [New] refused a machine definition. It matches
// [ErrInvalidDefinition].
type DefinitionError struct {
	Machine string
	Problem string
}

// Error names the machine and what is wrong with its definition.
func (e *DefinitionError) Error() string {
	return fmt.Sprintf("lifecycle: machine %q: %s", e.Machine, e.Problem)
}

// Is matches ErrInvalidDefinition.
func (e *DefinitionError) Is(target error) bool { return target == ErrInvalidDefinition }

type transitionKey struct{}

// WithTransition returns a copy of ctx that carries tc: [Machine.Fire]
// under it reports tc in the errors of a refused move.
func WithTransition(ctx context.Context, tc lifecycle.TransitionContext) context.Context {
	return context.WithValue(ctx, transitionKey{}, &tc)
}

// transitionOf returns the context WithTransition put in ctx, or nil.
func transitionOf(ctx context.Context) *lifecycle.TransitionContext {
	tc, _ := ctx.Value(transitionKey{}).(*lifecycle.TransitionContext)
	return tc
}
