package conveyor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// inboxJobPrefix starts the id of a job an inbox entry started: the
// entry's id follows, so the id is the entry's and the same every time.
const inboxJobPrefix = "inbox:"

// inboxJobPayload is the payload of a job an inbox entry started: the
// entry's id (the job's link back to it) and what the entry asks for.
type inboxJobPayload struct {
	InboxEntryID  string `json:"inbox_entry_id"`
	Action        string `json:"action"`
	Target        string `json:"target"`
	CorrelationID string `json:"correlation_id,omitempty"`
	Priority      string `json:"priority,omitempty"`
}

// inboxJobID is the job id of entry id: inbox:{id}, or, for an id too long
// for that to be an id, inbox:{sha256 of id}.
func inboxJobID(entryID string) string {
	if len(inboxJobPrefix)+len(entryID) <= storekey.MaxIDLen {
		return inboxJobPrefix + entryID
	}
	sum := sha256.Sum256([]byte(entryID))
	return inboxJobPrefix + hex.EncodeToString(sum[:])
}

// newInboxJobs returns the inbox's dispatch for Config.InboxJobs (nil
// without a mapping): the seam where the inbox and the job queue meet, in
// the composition root, since neither engine imports the other. Each type
// must be one of userTypes or an NLM type.
func newInboxJobs(q *jobqueue.Queue, mapping map[string]lifecycle.JobType, userTypes map[lifecycle.JobType]jobqueue.TypeConfig) (func(context.Context, lifecycle.InboxEntry) (string, error), error) {
	if len(mapping) == 0 {
		return nil, nil
	}
	types := make(map[string]lifecycle.JobType, len(mapping))
	for action, t := range mapping {
		_, user := userTypes[t]
		if !user && t != lifecycle.JobResearch && t != lifecycle.JobBrief && t != lifecycle.JobProposalPreprocess {
			return nil, fmt.Errorf("%w: InboxJobs maps %q to %q: not a type of JobTypes nor an NLM type", ErrInvalidConfig, action, t)
		}
		types[action] = t
	}
	return func(ctx context.Context, e lifecycle.InboxEntry) (string, error) {
		t, ok := types[e.Intent.Action]
		if !ok {
			return "", nil
		}
		payload, err := json.Marshal(inboxJobPayload{InboxEntryID: e.ID, Action: e.Intent.Action, Target: e.Intent.Target,
			CorrelationID: e.Metadata.CorrelationID, Priority: e.Metadata.Priority})
		if err != nil {
			return "", err
		}
		n := jobqueue.NewJob{JobID: inboxJobID(e.ID), JobType: t, Payload: payload}
		if e.Metadata.Priority == "high" {
			n.Priority = lifecycle.DefaultPriority + 2
		}
		job, err := q.InsertJob(ctx, n)
		if errors.Is(err, lifecycle.ErrJobExists) {
			// Enqueued by an earlier try (a retry after a lost answer,
			// another process's pass): the same job, not a second one.
			return n.JobID, nil
		}
		if err != nil {
			return "", fmt.Errorf("enqueue %s job %s: %w", t, n.JobID, err)
		}
		return job.JobID, nil
	}, nil
}
