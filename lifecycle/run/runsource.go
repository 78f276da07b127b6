package run

import (
	"context"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/paging"
	"github.com/runconveyor/conveyor/lifecycle"
)

// Where a run came from: its trigger source, and the repository and pull
// request of a webhook run, with the listing of a repository's runs.

// runStatusSchema is the schema_version a run's status is written with.
const runStatusSchema = 1

// The sources of a run (trigger_source.source).
const (
	sourceUI        = "ui"
	sourceCLI       = "cli"
	sourceWebhook   = "webhook"
	sourceScheduled = "scheduled"
	sourceAPI       = "api"
)

// checkSource refuses a submit whose source fields break their limits or
// name a source outside the set.
func checkSource(req *lifecycle.SubmitRequest) error {
	switch req.Source {
	case "", sourceUI, sourceCLI, sourceWebhook, sourceScheduled, sourceAPI:
	default:
		return &RequestError{Field: "source", Reason: fmt.Sprintf("%q is not ui, cli, webhook, scheduled or api", req.Source)}
	}
	for _, f := range []struct{ name, v string }{{"webhook_event_id", req.WebhookEventID}, {"pr_id", req.PRID}, {"pr_url", req.PRURL}} {
		if err := codes.CheckText(f.name, f.v, codes.MaxNameBytes, codes.OneLine); err != nil {
			return err
		}
	}
	if req.RepoID != "" {
		if _, err := layout.RepoRunsRepoPrefix(req.RepoID); err != nil {
			return &RequestError{Field: "repo_id", Reason: err.Error()}
		}
	}
	return nil
}

// setSource fills a new run's document with where it came from: the
// source object beside the flat trigger (by the trigger when the submit
// named none), and the repository and pull request.
func setSource(doc *lifecycle.RunStatus, req *lifecycle.SubmitRequest) {
	src := req.Source
	if src == "" {
		switch req.Trigger {
		case triggerCron:
			src = sourceScheduled
		case triggerEvent:
			src = sourceWebhook
		default:
			src = sourceAPI
		}
	}
	doc.TriggerSource = &lifecycle.TriggerSource{Source: src, UserID: req.UserID, WebhookEventID: req.WebhookEventID}
	doc.RepoID, doc.PRID, doc.PRURL = req.RepoID, req.PRID, req.PRURL
}

// requestedBy is who an approval gate of doc's run is asked for on behalf
// of: the submitting user, else the agent.
func requestedBy(doc *lifecycle.RunStatus) string {
	if ts := doc.TriggerSource; ts != nil && ts.UserID != "" {
		return ts.UserID
	}
	return "agent:" + doc.AgentSlug
}

// indexRepo writes a run's entry among its repository's runs, when it
// names one; create-only, as every index entry of a new run.
func (h *history) indexRepo(ctx context.Context, doc *lifecycle.RunStatus) error {
	if doc.RepoID == "" {
		return nil
	}
	key, err := layout.RepoRunsKey(doc.RepoID, doc.StartedAt, doc.RunID)
	if err != nil {
		return err
	}
	return putOnce(ctx, h.store, key, nil)
}

// listRepoRuns is ListRuns of q.Repo: the runs of one repository, newest
// first, of every agent of this runner (Status filters as for an agent).
// An entry whose run is gone (retention deleted it) is skipped.
func (rd *reads) listRepoRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	limit, err := paging.Limit(q.Limit)
	if err != nil {
		return RunPage{}, err
	}
	after, err := paging.Cursor(q.Cursor, func(e string) bool { _, _, ok := layout.ParseNewestFirst(e); return ok })
	if err != nil {
		return RunPage{}, err
	}
	prefix, err := layout.RepoRunsRepoPrefix(q.Repo)
	if err != nil {
		return RunPage{}, &RequestError{Field: "repo", Reason: err.Error()}
	}
	runs, next, err := paging.Read(ctx, rd.store, []string{prefix}, after, limit, 0, func(ctx context.Context, _ int, entry string) (lifecycle.RunStatus, bool, error) {
		_, runID, ok := layout.ParseNewestFirst(entry)
		if !ok {
			return lifecycle.RunStatus{}, false, nil
		}
		doc, err := rd.status(ctx, runID)
		if err != nil {
			if errors.Is(err, lifecycle.ErrRunNotFound) {
				return lifecycle.RunStatus{}, false, nil
			}
			return lifecycle.RunStatus{}, false, err
		}
		keep := (q.Agent == "" || doc.AgentSlug == q.Agent) && (q.Status == "" || doc.Status == q.Status)
		return doc, keep, nil
	})
	if err != nil {
		return RunPage{}, err
	}
	return RunPage{Runs: runs, Next: next}, nil
}
