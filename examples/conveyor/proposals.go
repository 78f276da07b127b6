package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
)

const proposalsUsage = "proposals [pending] [-limit N] [-cursor C] [-all] | proposals show <id> | proposals apply <id> [-reason R] | proposals reject <id> [-reason R]"

// proposals lists the pending proposals, shows one, or applies or rejects
// one (the gateway's decision).
func (c *command) proposals(ctx context.Context, in *invocation) error {
	p := client.Proposals{Client: c.c}
	pos := in.pos
	switch {
	case len(pos) == 0 || (len(pos) == 1 && pos[0] == "pending"):
		return c.pendingProposals(ctx, p, in)
	case len(pos) == 2 && pos[0] == "show":
		got, err := p.Get(ctx, pos[1])
		if err != nil {
			return err
		}
		return c.json(got)
	case len(pos) == 2 && (pos[0] == "apply" || pos[0] == "reject"):
		got, err := p.Decide(ctx, pos[1], pos[0] == "apply", in.reason)
		if err != nil {
			return err
		}
		return c.json(got)
	}
	return usageError(proposalsUsage)
}

func (c *command) pendingProposals(ctx context.Context, p client.Proposals, in *invocation) error {
	ps, next, err := p.Pending(ctx, client.Query{Limit: in.limit, Cursor: in.cursor, All: in.all})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROPOSAL\tRUN\tAGENT\tSTEP\tCREATED\tCONTENT")
	for _, x := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.RunID, x.AgentSlug, x.Step, x.CreatedAt.Format(time.RFC3339), x.ContentKey)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.errOut, "more: add -cursor %s (or -all)\n", next)
	}
	return nil
}
