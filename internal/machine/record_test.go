package machine_test

// record is a [lifecycle.Stateful] record for the tests of the run and step
// machines, which move any record that keeps its state as a string (the run
// package's status.json and step files among them).
type record struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
}

func (r *record) State() string     { return r.Status }
func (r *record) SetState(s string) { r.Status = s }
