package inbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleMachine() {
	ctx := context.Background()
	entry := &lifecycle.InboxEntry{ID: "inbox_2026-02-14_abc123", Status: lifecycle.InboxPending}

	_, err := machine.InboxMachine().Fire(ctx, entry, machine.EventInboxExpire, lifecycle.ActorSystem)
	fmt.Println(entry.Status, err)

	_, err = machine.InboxMachine().Fire(ctx, entry, machine.EventInboxProcess, lifecycle.ActorGateway)
	fmt.Println(errors.Is(err, lifecycle.ErrTerminalState))
	// Output:
	// expired <nil>
	// true
}
