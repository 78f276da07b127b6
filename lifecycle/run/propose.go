package run

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/proposals"
	"github.com/runconveyor/conveyor/lifecycle"
)

// proposalID is the id of the proposal a step of a run makes of its output
// file name: the same for every attempt and every runner, so a step run
// again (a retry, a takeover) creates the record it made, not another.
func proposalID(runID string, step int, name string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%s", runID, step, name))
	return "prop_" + hex.EncodeToString(h[:10])
}

// nameProposals checks that every file out.Propose names is one of
// out.Files and adds the ids of their proposals to out.Proposals, before
// the step file records them.
func nameProposals(in StepInput, out *StepOutput) error {
	for _, name := range out.Propose {
		if _, ok := out.Files[name]; !ok {
			return &lifecycle.RunError{Code: codes.InvalidRequest, Permanent: true,
				Message: fmt.Sprintf("step %d proposes %q, which is not one of its files", in.Step, name)}
		}
		if id := proposalID(in.RunID, in.Step, name); !slices.Contains(out.Proposals, id) {
			out.Proposals = append(out.Proposals, id)
		}
	}
	return nil
}

// createProposals records a pending proposal for each file out.Propose
// names, once the files are written: the step is Mastra's, which writes
// the memory only by creating proposals (the Memory Backend's authority
// table); create-only, so a step run again finds its records.
func (x *execution) createProposals(ctx context.Context, i int, s Step, out StepOutput) error {
	if len(out.Propose) == 0 {
		return nil
	}
	if err := x.w.confirmLease(ctx); err != nil {
		return err
	}
	ps := proposals.New(x.e.store, x.e.now, x.e.cfg.Owner, x.e.log)
	for _, name := range out.Propose {
		key, err := layout.RunOutputKey(x.agent.Slug, x.w.runID, name)
		if err != nil {
			return &lifecycle.RunError{Code: codes.InternalError, Message: err.Error(), Permanent: true, Err: err}
		}
		p := lifecycle.Proposal{ID: proposalID(x.w.runID, i+1, name), RunID: x.w.runID, AgentSlug: x.agent.Slug, Step: s.Name, ContentKey: key,
			TenantID: x.tenant}
		if _, err := ps.Create(lifecycle.WithTenant(ctx, x.tenant), lifecycle.ActorMastra, p); err != nil {
			return err
		}
	}
	return nil
}
