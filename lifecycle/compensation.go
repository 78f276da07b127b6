package lifecycle

import "time"

// CompensationEntry is one line of a run's compensation_log
// (docs/spec.md#compensation): the undoing of one completed step, written
// once that compensation ended. A run that ends canceled (or failed, when
// its agent asks) after steps that can be undone carries the whole log in
// its terminal status.
type CompensationEntry struct {
	// Step and StepNumber name the step undone.
	Step       string `json:"step"`
	StepNumber int    `json:"step_number"`
	// Action is what was done, "compensate" unless the step names it.
	Action    string    `json:"action"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	// Outcome is "compensated" (the compensation returned nil) or
	// "failed" (every attempt failed, or the compensation phase's
	// deadline passed first; the run still ends).
	Outcome  string `json:"outcome"`
	Attempts int    `json:"attempts,omitempty"`
	// Error is "CODE: message" when the compensation failed.
	Error string `json:"error,omitempty"`
}
