package machine_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/qmuntal/stateless"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// BenchmarkCheck measures our from → to check on the cancel-aware run
// machine. Target: 0 allocs/op and ≥ 10× faster than BenchmarkStatelessCanFire.
func BenchmarkCheck(b *testing.B) {
	m := machine.CancelableRun()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Check(machine.CancelableRunning, machine.CancelableCancelRequested); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatelessCanFire is the baseline: stateless's CanFire for the same
// move on the same machine, configured once by hand from the spec's table.
func BenchmarkStatelessCanFire(b *testing.B) {
	sm := stateless.NewStateMachine(machine.CancelableRunning)
	for _, t := range machine.CancelableRun().Transitions() {
		sm.Configure(t.From).Permit(t.Event, t.To)
	}
	b.ReportAllocs()
	for b.Loop() {
		ok, err := sm.CanFire(machine.EventRequestCancel)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkFire measures a whole Fire (through stateless, actor and guard
// checks included) for comparison.
func BenchmarkFire(b *testing.B) {
	m := machine.CancelableRun()
	ctx := context.Background()
	run := &record{}
	b.ReportAllocs()
	for b.Loop() {
		run.Status = string(machine.CancelableRunning)
		if _, err := m.Fire(ctx, run, machine.EventRequestCancel, lifecycle.ActorOrchestration); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckDoesNotAllocate holds the zero-allocation promise outside
// benchmarks too, for every valid move of every run machine.
func TestCheckDoesNotAllocate(t *testing.T) {
	m := machine.CancelableRun()
	for _, tr := range m.Transitions() {
		if n := testing.AllocsPerRun(100, func() { _ = m.Check(tr.From, tr.To) }); n != 0 {
			t.Errorf("Check(%q, %q) allocates %v times", tr.From, tr.To, n)
		}
	}
}

// BenchmarkCheckDecoded measures Check on the production path: the from
// state decoded from a status.json (its bytes are the decoder's, not a
// constant's), the to state a constant, as the Runner checks a move.
func BenchmarkCheckDecoded(b *testing.B) {
	m := machine.CancelableRun()
	var doc record
	if err := json.Unmarshal([]byte(`{"run_id":"r","status":"running"}`), &doc); err != nil {
		b.Fatal(err)
	}
	from := machine.CancelableRunState(doc.Status)
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Check(from, machine.CancelableCancelRequested); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFireAllocs holds Fire to its allocation budget on the job queue's
// production path: a job decoded from JSON (its state's bytes the
// decoder's) moved by the pickup's event. Of the 3 allocations, 2 are
// stateless's own (the trigger in an interface, its list of unmet guards)
// and 1 is the firing, which is its own context
// (5 before, issue 22: context.WithValue and the state in an interface).
func TestFireAllocs(t *testing.T) {
	m := machine.JobMachine()
	ctx := context.Background()
	var job lifecycle.Job
	if err := json.Unmarshal([]byte(`{"status":"QUEUED","attempt":0,"max_attempts":3}`), &job); err != nil {
		t.Fatal(err)
	}
	queued := job.Status
	n := testing.AllocsPerRun(100, func() {
		job.Status, job.Attempt = queued, 0
		if _, err := m.Fire(ctx, &job, machine.EventPickup, lifecycle.ActorOrchestration); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Errorf("Fire allocates %v times, budget 3", n)
	}
}
