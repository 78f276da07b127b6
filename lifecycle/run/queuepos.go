package run

import (
	"context"
	"strings"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
)

// markQueued sets a read's QueuePosition (docs/spec.md#run-status) for a
// run waiting for a slot: 1 plus the runs of its agent ahead of it, those
// requested or queued whose ids sort before its own. Runners consider the
// waiting runs in the order the poll lists the active index, which is run
// id order, and run ids begin with their submit's second, so the oldest
// goes first. The position is an estimate, exact but for runs submitted
// within one second (their ids' random tails order them) and for several
// runners racing for a freed slot. Its cost is a List of the agent's
// active runs up to this one and a read of each: the runs not yet
// terminal, never the history. Never stored; left unset when the index
// cannot be read.
func (rd *reads) markQueued(ctx context.Context, d *lifecycle.RunStatus) {
	d.QueuePosition = 0
	f := rd.cat.flowOfDoc(d)
	if d.Status != f.waiting {
		return
	}
	own, err := layout.RunActiveKey(d.AgentSlug, d.RunID)
	if err != nil {
		return
	}
	prefix := own[:len(own)-len(d.RunID)]
	ahead := 0
	for key, err := range rd.store.List(ctx, prefix) {
		if err != nil {
			return
		}
		if strings.Compare(key, own) >= 0 {
			break
		}
		slug, runID, ok := layout.ParseRunActiveKey(key)
		if !ok {
			continue
		}
		statusKey, err := layout.RunStatusKey(slug, runID)
		if err != nil {
			continue
		}
		doc, _, err := rd.statuses.read(ctx, slug, runID, statusKey)
		if err != nil {
			continue // not written yet, or gone: not ahead
		}
		if of := rd.cat.flowOfDoc(&doc); doc.Status == of.waiting || doc.Status == of.initial {
			ahead++
		}
	}
	d.QueuePosition = ahead + 1
}
