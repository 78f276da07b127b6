package inbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleMachine() {
	ctx := context.Background()
	entry := &inbox.Entry{ID: "inbox_2026-02-14_abc123", Status: inbox.Pending}

	_, err := inbox.Machine().Fire(ctx, entry, inbox.EventExpire, lifecycle.ActorSystem)
	fmt.Println(entry.Status, err)

	_, err = inbox.Machine().Fire(ctx, entry, inbox.EventProcess, lifecycle.ActorGateway)
	fmt.Println(errors.Is(err, lifecycle.ErrTerminalState))
	// Output:
	// expired <nil>
	// true
}
