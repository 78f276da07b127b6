package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestInboxNewCountsByTenant: entries of two tenants submitted within one
// poll each reach their own tenant's clients only, each counting its own
// tenant's pending entries; a client of every tenant gets them all, each
// with its tenant's count.
func TestInboxNewCountsByTenant(t *testing.T) {
	t.Parallel()
	r := newRig(t, memstore.New(), events.Config{})
	mine, acme, all := r.openAs(""), r.openAs("acme"), r.openAs(lifecycle.AllTenants)
	box, err := inbox.New(inbox.Config{Store: r.store, Clock: r.clk})
	if err != nil {
		t.Fatal(err)
	}
	// inbox.new of id with count n.
	newEv := func(id, n string) string {
		return `inbox.new {"type":"inbox.new","entryId":"` + id + `","count":` + n + `}`
	}
	sub := func(tenant string) string {
		r.clk.Advance(time.Millisecond)
		ctx := lifecycle.WithTenant(context.Background(), tenant)
		e, err := box.Submit(ctx, lifecycle.ActorGateway, lifecycle.InboxSubmission{
			Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"}, Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "notes/x"}})
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	a1, d1, a2 := sub("acme"), sub(""), sub("acme")
	// An end marker of each tenant: the default tenant's, then acme's.
	end := r.marker(r.store, "end")
	r.clk.Advance(time.Millisecond)
	acmeEnd := r.record(r.store, lifecycle.AuditEvent{Event: "job.status.update", JobID: "marker-acme", TenantID: "acme", From: "QUEUED", To: "CONTEXT_ASSEMBLY"})
	for _, c := range []struct {
		name string
		s    *stream
		end  string
		want []string
	}{
		{"the default tenant's client", mine, end.ID, []string{newEv(d1, "1")}},
		{"acme's client", acme, acmeEnd.ID, []string{newEv(a1, "2"), newEv(a2, "2")}},
		{"every tenant's client", all, acmeEnd.ID, []string{newEv(a1, "2"), newEv(d1, "1"), newEv(a2, "2")}},
	} {
		var got []string
		for _, w := range wire(r.untilID(c.s, c.end)) {
			if len(w) > 10 && w[:10] == "inbox.new " {
				got = append(got, w)
			}
		}
		eq(t, c.name, got, c.want)
	}
}
