package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The answers of the Worker's HTTP API that have no record of their own
// elsewhere: the server writes them and its Go client returns them
// (docs/http-api.md).

// AgentInfo describes one agent the Worker executes (GET /agents).
type AgentInfo struct {
	Slug    string `json:"slug"`
	Machine string `json:"machine"`
	// Spec is the run machine's table.
	Spec        Spec     `json:"spec"`
	Steps       []string `json:"steps"`
	Concurrency int      `json:"concurrency"`
}

// Quarantined is a record kept out of the way because it could not be
// decoded (GET /quarantine): where it was, why, when, and its bytes.
type Quarantined struct {
	// QKey is where the record is kept now; restoring it names this key.
	QKey          string    `json:"qkey"`
	Key           string    `json:"key"`
	Reason        string    `json:"reason"`
	QuarantinedAt time.Time `json:"quarantined_at"`
	Data          []byte    `json:"data"`
}

// Schedules reads, pauses and resumes the schedules of every process on a
// store (a Client's scheduler, served at /schedules). Pause and Resume of
// an id no schedule has fail with an error matching ErrNotFound.
type Schedules interface {
	List(ctx context.Context) ([]ScheduleInfo, error)
	Pause(ctx context.Context, id, by string) (ScheduleInfo, error)
	Resume(ctx context.Context, id string) (ScheduleInfo, error)
}

// ScheduleInfo is a schedule as GET /schedules lists it: the schedule's
// fields and where it stands, the one JSON object the server writes
// (Every and Jitter as Go duration strings, "20s").
type ScheduleInfo struct {
	ID       string          `json:"id"`
	Agent    string          `json:"agent"`
	Cron     string          `json:"cron,omitempty"`
	Every    time.Duration   `json:"every,omitempty"`
	TimeZone string          `json:"time_zone,omitempty"`
	Jitter   time.Duration   `json:"jitter,omitempty"`
	Missed   string          `json:"missed,omitempty"`
	CatchUp  int             `json:"catch_up,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	// Next is the next slot, LastSlot the latest dealt with, LastFired
	// and LastRunID the latest that started a run.
	Next      time.Time  `json:"next"`
	LastSlot  time.Time  `json:"last_slot"`
	LastFired *time.Time `json:"last_fired,omitempty"`
	LastRunID string     `json:"last_run_id,omitempty"`
	Paused    bool       `json:"paused"`
	PausedBy  string     `json:"paused_by,omitempty"`
}

// scheduleFields is ScheduleInfo without its JSON methods.
type scheduleFields ScheduleInfo

// scheduleOut is the JSON the server writes for a schedule, in its order:
// the schedule's fields (Every and Jitter as Go duration strings), then its
// progress.
type scheduleOut struct {
	ID        string          `json:"id"`
	Agent     string          `json:"agent"`
	Cron      string          `json:"cron,omitempty"`
	TimeZone  string          `json:"time_zone,omitempty"`
	Missed    string          `json:"missed,omitempty"`
	CatchUp   int             `json:"catch_up,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Every     string          `json:"every,omitempty"`
	Jitter    string          `json:"jitter,omitempty"`
	Next      time.Time       `json:"next"`
	LastSlot  time.Time       `json:"last_slot"`
	LastFired *time.Time      `json:"last_fired,omitempty"`
	LastRunID string          `json:"last_run_id,omitempty"`
	Paused    bool            `json:"paused"`
	PausedBy  string          `json:"paused_by,omitempty"`
}

// MarshalJSON writes what the server writes, so a program that prints a
// ScheduleInfo prints the server's answer.
func (s ScheduleInfo) MarshalJSON() ([]byte, error) {
	v := scheduleOut{ID: s.ID, Agent: s.Agent, Cron: s.Cron, TimeZone: s.TimeZone, Missed: s.Missed, CatchUp: s.CatchUp,
		Input: s.Input, Next: s.Next, LastSlot: s.LastSlot, LastFired: s.LastFired, LastRunID: s.LastRunID,
		Paused: s.Paused, PausedBy: s.PausedBy}
	if s.Every != 0 {
		v.Every = s.Every.String()
	}
	if s.Jitter != 0 {
		v.Jitter = s.Jitter.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads Every and Jitter as Go duration strings, or as
// numbers of nanoseconds.
func (s *ScheduleInfo) UnmarshalJSON(b []byte) error {
	var v struct {
		*scheduleFields
		Every  json.RawMessage `json:"every,omitempty"`
		Jitter json.RawMessage `json:"jitter,omitempty"`
	}
	v.scheduleFields = (*scheduleFields)(s)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var err error
	if s.Every, err = scheduleDuration("every", v.Every); err != nil {
		return err
	}
	s.Jitter, err = scheduleDuration("jitter", v.Jitter)
	return err
}

// scheduleDuration reads a duration written as a Go duration string or as
// a number of nanoseconds; absent or null is 0.
func scheduleDuration(field string, raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		d, err := time.ParseDuration(str)
		if err != nil {
			return 0, fmt.Errorf("httpapi: schedule's %s: %w", field, err)
		}
		return d, nil
	}
	var ns int64
	if err := json.Unmarshal(raw, &ns); err != nil {
		return 0, fmt.Errorf("httpapi: schedule's %s: want a duration such as \"20s\"", field)
	}
	return time.Duration(ns), nil
}
