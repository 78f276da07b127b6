package authority_test

import (
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleCheck() {
	// The frontend reads jobs but never updates their status.
	fmt.Println(authority.Check(lifecycle.ActorFrontend, authority.Jobs, authority.Read, authority.Scope{}))
	err := authority.Check(lifecycle.ActorFrontend, authority.Jobs, authority.UpdateStatus, authority.Scope{})
	var fe *authority.ForbiddenError
	fmt.Println(errors.As(err, &fe), fe.Code(), errors.Is(err, authority.ErrForbidden))
	// The NLM backend reads only its own job.
	fmt.Println(authority.Check(lifecycle.ActorNLMBackend, authority.Jobs, authority.Read, authority.Scope{Own: true}))
	// Output:
	// <nil>
	// true FORBIDDEN true
	// <nil>
}
