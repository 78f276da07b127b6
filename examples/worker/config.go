package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/webhook"
	"github.com/runconveyor/conveyor/lifecycle/run/schedule"
)

// fileConfig is the -config file: the Worker's schedules and the routes of
// its webhooks, e.g.
//
//	{"schedules": [
//	  {"id": "morning-digest", "agent": "demo-research", "cron": "0 7 * * 1-5", "time_zone": "Europe/Kyiv"},
//	  {"id": "heartbeat", "agent": "demo-research", "every": "15m", "jitter": "30s", "missed": "latest"}
//	 ],
//	 "webhooks": [
//	  {"source": "github", "event": "pull_request.opened", "agent": "demo-research"},
//	  {"source": "slack", "event": "/research", "agent": "demo-research"}
//	]}
//
// The webhooks' secrets come from the environment, never the file:
// CONVEYOR_GITHUB_SECRET and CONVEYOR_SLACK_SIGNING_SECRET.
type fileConfig struct {
	Schedules []fileSchedule `json:"schedules"`
	Webhooks  []fileRoute    `json:"webhooks"`
}

// fileRoute is a webhook.Route.
type fileRoute struct {
	Source string `json:"source"`
	Event  string `json:"event"`
	Agent  string `json:"agent"`
}

func (c fileConfig) routes() []webhook.Route {
	out := make([]webhook.Route, 0, len(c.Webhooks))
	for _, r := range c.Webhooks {
		out = append(out, webhook.Route{Source: r.Source, Event: r.Event, Agent: r.Agent})
	}
	return out
}

// fileSchedule is a schedule.Schedule with durations written as Go
// durations ("15m") rather than nanoseconds.
type fileSchedule struct {
	ID       string          `json:"id"`
	Agent    string          `json:"agent"`
	Cron     string          `json:"cron"`
	Every    string          `json:"every"`
	TimeZone string          `json:"time_zone"`
	Jitter   string          `json:"jitter"`
	Missed   schedule.Missed `json:"missed"`
	CatchUp  int             `json:"catch_up"`
	Input    json.RawMessage `json:"input"`
}

// readConfig reads the -config file (none: an empty config).
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

// schedules converts the file's schedules; schedule.New checks the rest.
func (c fileConfig) schedules() ([]schedule.Schedule, error) {
	out := make([]schedule.Schedule, 0, len(c.Schedules))
	for _, f := range c.Schedules {
		s := schedule.Schedule{ID: f.ID, Agent: f.Agent, Cron: f.Cron, TimeZone: f.TimeZone, Missed: f.Missed, CatchUp: f.CatchUp, Input: f.Input}
		for _, d := range []struct {
			text string
			to   *time.Duration
		}{{f.Every, &s.Every}, {f.Jitter, &s.Jitter}} {
			if d.text == "" {
				continue
			}
			v, err := time.ParseDuration(d.text)
			if err != nil {
				return nil, fmt.Errorf("schedule %s: %w", f.ID, err)
			}
			*d.to = v
		}
		out = append(out, s)
	}
	return out, nil
}
