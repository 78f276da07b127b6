package machine_test

import (
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestCheckNamesFromAnywhere checks every pair with state names that share no
// bytes with the constants (as names decoded from JSON do), so the hashed path
// agrees with the identity path.
func TestCheckNamesFromAnywhere(t *testing.T) {
	t.Parallel()
	m := machine.ApprovalRun()
	for _, from := range m.States() {
		for _, to := range m.States() {
			f := machine.ApprovalRunState(strings.Clone(string(from)))
			g := machine.ApprovalRunState(strings.Clone(string(to)))
			if m.Allowed(f, g) != m.Allowed(from, to) {
				t.Errorf("Allowed(%q, %q) differs for copied names", from, to)
			}
		}
	}
}

// TestCheckPrefixSharingBytes: "running"[:3] shares its bytes with a state
// constant but is no state.
func TestCheckPrefixSharingBytes(t *testing.T) {
	t.Parallel()
	m := machine.CanonicalRun()
	run := string(machine.RunRunning)
	if m.Allowed(machine.RunState(run[:3]), machine.RunCompleted) || m.IsState(machine.RunState(run[:3])) {
		t.Errorf("a prefix of %q is taken for the state", run)
	}
	if m.Allowed("", machine.RunCompleted) || m.Allowed(machine.RunRunning, "") {
		t.Errorf("the empty name is taken for a state")
	}
}

// TestCheckCollidingNames builds a machine whose names share length, first,
// middle and last byte, so no perfect hash exists and lookups use the map.
func TestCheckCollidingNames(t *testing.T) {
	t.Parallel()
	who := []lifecycle.Actor{lifecycle.ActorSystem}
	m := machine.MustNew(machine.Definition[light, *lamp]{
		Name:     "colliding",
		Initial:  "axxb",
		States:   []light{"axxb", "ayxb", "azxb"},
		Terminal: []light{"azxb"},
		Transitions: []machine.Transition[light, *lamp]{
			{From: "axxb", To: "ayxb", Event: "go", Actors: who},
			{From: "ayxb", To: "azxb", Event: "go", Actors: who},
		},
		GetState: func(l *lamp) light { return l.state },
		SetState: func(l *lamp, s light) { l.state = s },
	})
	tests := []struct {
		from, to light
		want     bool
	}{
		{"axxb", "ayxb", true}, {"ayxb", "azxb", true}, {"axxb", "azxb", false},
		{"azxb", "axxb", false}, {"aqxb", "ayxb", false},
	}
	for _, tt := range tests {
		f, g := light(strings.Clone(string(tt.from))), light(strings.Clone(string(tt.to)))
		if got := m.Allowed(f, g); got != tt.want {
			t.Errorf("Allowed(%q, %q) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
		if got := m.Allowed(tt.from, tt.to); got != tt.want {
			t.Errorf("Allowed(%q, %q) with constants = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("running", "cancel_requested")
	f.Add("runnin", "x")
	f.Add("", "queued")
	m := machine.CancelableRun()
	f.Fuzz(func(t *testing.T, from, to string) {
		want := false
		for _, tr := range m.Transitions() {
			if string(tr.From) == from && string(tr.To) == to {
				want = true
			}
		}
		got := m.Allowed(machine.CancelableRunState(from), machine.CancelableRunState(to))
		if got != want {
			t.Fatalf("Allowed(%q, %q) = %v, want %v", from, to, got, want)
		}
		if err := m.Check(machine.CancelableRunState(from), machine.CancelableRunState(to)); (err == nil) != want {
			t.Fatalf("Check(%q, %q) = %v", from, to, err)
		}
	})
}
