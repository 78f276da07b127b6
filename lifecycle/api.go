package lifecycle

import (
	"context"
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
	// After is a graph agent's: by step name, the steps it depends on
	// (absent for a linear agent, whose steps run in the order listed).
	After map[string][]string `json:"after,omitempty"`
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
