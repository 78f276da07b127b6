package lifecycle

import (
	"encoding/json"
	"time"
)

// Schedule is one schedule: when to start which agent's run, or, with Job
// set, which job to enqueue (a periodic job). Each slot starts exactly one
// run, or enqueues exactly one job, across the processes sharing the Store
// (docs/spec.md#idempotency: the run's idempotency key, and the job's id,
// is scheduler:{id}:{slot}). In JSON,
// Every and Jitter are Go duration strings ("20s", "1m30s"), the form a
// person writes in a config file.
type Schedule struct {
	// ID names the schedule in its state's key and in its runs'
	// idempotency keys (its jobs' ids): letters, digits, "-", "_" and ".".
	// Required.
	ID string `json:"id"`
	// Agent is the agent whose run each slot starts. Required unless Job
	// is set; then empty.
	Agent string `json:"agent,omitempty"`
	// Cron is a five-field cron expression ("*/5 * * * *") or a descriptor
	// ("@hourly", "@every 90s"). Exactly one of Cron and Every is set.
	Cron string `json:"cron,omitempty"`
	// Every is a fixed interval; its slots are the multiples of it since
	// the Unix epoch. Whole seconds, at least one.
	Every time.Duration `json:"every,omitempty"`
	// TimeZone is the IANA zone Cron is read in. Default UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Jitter delays each slot's firing by up to this much, by an amount
	// every process computes alike from the schedule and the slot (the
	// slot's key stays the slot's own time). Default none.
	Jitter time.Duration `json:"jitter,omitempty"`
	// Missed is what happens to slots that passed while no process fired
	// them (an outage, a clock jump forward): "catch_up" (the default)
	// fires them, oldest first, at most CatchUp of them; "latest" fires
	// the latest once; "skip" fires none.
	Missed string `json:"missed,omitempty"`
	// CatchUp bounds "catch_up". Default 12.
	CatchUp int `json:"catch_up,omitempty"`
	// Input is handed to the run's steps (a run's schedule only).
	Input json.RawMessage `json:"input,omitempty"`
	// Job, when set, makes each slot enqueue this job instead of starting
	// a run: a periodic job (docs/spec.md#periodic-jobs).
	Job *ScheduleJob `json:"job,omitempty"`
	// Tenant is the tenant the slots' runs and jobs belong to
	// (docs/spec.md#tenants), a storage id. Default "": the default tenant.
	Tenant string `json:"tenant,omitempty"`
}

// ScheduleJob is the job each slot of a periodic job's schedule enqueues,
// as the system. Its id is the slot's key, scheduler:{id}:{slot}, so a
// slot fired twice is the same job, refused as existing.
type ScheduleJob struct {
	// JobType is the job's type: a type the job queue is configured for.
	// Required.
	JobType JobType `json:"job_type"`
	// AgentSlug is the lane the job runs in; empty: its type's lane.
	AgentSlug string `json:"agent_slug,omitempty"`
	// Payload is the job's payload, JSON.
	Payload json.RawMessage `json:"payload,omitempty"`
	// MaxAttempts is the job's max_attempts; 0: the queue's default.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// scheduleFields has Schedule's fields without its JSON methods.
type scheduleFields Schedule

// MarshalJSON writes Every and Jitter as Go duration strings.
func (s Schedule) MarshalJSON() ([]byte, error) {
	v := struct {
		scheduleFields
		Every  string `json:"every,omitempty"`
		Jitter string `json:"jitter,omitempty"`
	}{scheduleFields: scheduleFields(s)}
	if s.Every != 0 {
		v.Every = s.Every.String()
	}
	if s.Jitter != 0 {
		v.Jitter = s.Jitter.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads Every and Jitter as Go duration strings ("20s");
// a number is read as nanoseconds, as versions before this one wrote them.
func (s *Schedule) UnmarshalJSON(b []byte) error {
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
	if s.Every, err = durationJSON("every", v.Every); err != nil {
		return err
	}
	s.Jitter, err = durationJSON("jitter", v.Jitter)
	return err
}

// durationJSON reads a duration written as a Go duration string or as a
// number of nanoseconds; absent or null is 0.
func durationJSON(field string, raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		d, err := time.ParseDuration(str)
		if err != nil {
			return 0, &InputError{Field: field, Reason: err.Error()}
		}
		return d, nil
	}
	var ns int64
	if err := json.Unmarshal(raw, &ns); err != nil {
		return 0, &InputError{Field: field, Reason: "want a duration such as \"20s\""}
	}
	return time.Duration(ns), nil
}

// ScheduleInfo is a schedule as GET /schedules lists it: the schedule and
// where it stands, in one JSON object.
type ScheduleInfo struct {
	Schedule
	ScheduleProgress
}

// ScheduleProgress is where a schedule stands.
type ScheduleProgress struct {
	// Next is the next slot, LastSlot the latest dealt with, LastFired
	// the latest that started a run (LastRunID) or enqueued a job
	// (LastJobID).
	Next      time.Time  `json:"next"`
	LastSlot  time.Time  `json:"last_slot"`
	LastFired *time.Time `json:"last_fired,omitempty"`
	LastRunID string     `json:"last_run_id,omitempty"`
	LastJobID string     `json:"last_job_id,omitempty"`
	Paused    bool       `json:"paused"`
	PausedBy  string     `json:"paused_by,omitempty"`
}

// MarshalJSON writes the schedule's fields and its progress as one object.
func (i ScheduleInfo) MarshalJSON() ([]byte, error) {
	a, err := json.Marshal(i.Schedule)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(i.ScheduleProgress)
	if err != nil {
		return nil, err
	}
	// Both are non-empty objects: {"id":…} and {"next":…}.
	return append(append(a[:len(a)-1], ','), b[1:]...), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (i *ScheduleInfo) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &i.Schedule); err != nil {
		return err
	}
	return json.Unmarshal(b, &i.ScheduleProgress)
}
