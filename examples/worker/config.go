package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/lifecycle"
)

// fileConfig is the -config file: the Worker's schedules (durations as Go
// durations, "15m") and the routes of its webhooks, e.g.
//
//	{"schedules": [
//	  {"id": "morning-digest", "agent": "demo-research", "cron": "0 7 * * 1-5", "time_zone": "Europe/Kyiv"},
//	  {"id": "heartbeat", "agent": "demo-research", "every": "15m", "jitter": "30s", "missed": "latest"},
//	  {"id": "nightly-brief", "cron": "0 2 * * *", "job": {"job_type": "BRIEF", "agent_slug": "briefs", "max_attempts": 3}}
//	 ],
//
// A schedule with "job" is a periodic job: each slot enqueues that job
// (job_type, and optionally agent_slug, payload, max_attempts) instead of
// starting an agent's run.
//
//	 "webhooks": [
//	  {"source": "github", "event": "pull_request.opened", "agent": "demo-research"},
//	  {"source": "slack", "event": "/research", "agent": "demo-research"},
//	  {"source": "github", "event": "check_suite.completed", "agent": "demo-approval", "deliver": true}
//	]}
//
// A route with "deliver" starts no run: it resumes the agent's runs
// waiting for the external event source + ":" + its event.
//
// The webhooks' secrets come from the environment, never the file:
// CONVEYOR_GITHUB_SECRET and CONVEYOR_SLACK_SIGNING_SECRET.
type fileConfig struct {
	Schedules []lifecycle.Schedule   `json:"schedules"`
	Webhooks  []httpapi.WebhookRoute `json:"webhooks"`
}

// readConfig reads the -config file (none: an empty config); the
// Scheduler checks the schedules.
func readConfig(path string) (fileConfig, error) {
	var c fileConfig
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
