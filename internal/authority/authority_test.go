package authority_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/lifecycle"
)

// The matrix's tables (docs/spec.md#authority-matrix) transcribed by hand as
// text, one line per component, cells in column order. One cell is
// amended, as docs/spec.md says: the admin's delete of jobs, the spec's ❌,
// is its retention cleanup of finished jobs. "own", "cleanup"
// and "meta" are the qualified cells; "-" is a component without a row.
const specJobs = `
gateway        ✅ ✅ ❌ ❌
orchestration  ✅ ✅ ✅ ❌
nlm-backend    ❌ own own ❌
mastra         ❌ ❌ ❌ ❌
admin          ❌ ✅ ✅ cleanup
frontend       ❌ ✅ ❌ ❌
system         - - - -
memory-backend - - - -
`

const specArtifacts = `
nlm-backend    ✅ ✅ ❌ ❌
orchestration  ❌ ✅ ❌ ❌
memory-backend ❌ ✅ ❌ ❌
admin          meta ✅ ❌ cleanup
frontend       ❌ ✅ ❌ ❌
gateway        ❌ ✅ ❌ ❌
mastra         - - - -
system         - - - -
`

// specMemory is the Memory Backend's table: layer 1 read, layer 2 read,
// write. "tool" and "xtool" are reads through a step's tool (the second
// layer's named explicitly), "prop" a write by creating a proposal, "gw" a
// write only through the gateway. The Apply Engine is the gateway.
const specMemory = `
orchestration  ✅ ❌ gw
mastra         tool xtool prop
nlm-backend    ✅ ❌ ❌
frontend       ❌ ❌ ❌
gateway        ✅ ✅ ✅
admin          - - -
system         - - -
memory-backend - - -
`

func parse(t *testing.T, table string, columns int) map[lifecycle.Actor][]string {
	t.Helper()
	out := map[lifecycle.Actor][]string{}
	for line := range strings.Lines(strings.TrimSpace(table)) {
		f := strings.Fields(line)
		if len(f) != columns+1 {
			t.Fatalf("bad line %q", line)
		}
		out[lifecycle.Actor(f[0])] = f[1:]
	}
	return out
}

// TestEveryCell checks every cell of the three tables, for every actor,
// both with and without the scope that qualified cells need.
func TestEveryCell(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r     authority.Resource
		table string
	}{{authority.Jobs, specJobs}, {authority.Artifacts, specArtifacts}, {authority.Memory, specMemory}} {
		want := parse(t, tc.table, len(authority.Operations(tc.r)))
		if len(want) != len(authority.Actors()) {
			t.Fatalf("%s: the transcription lists %d actors, the package knows %d", tc.r, len(want), len(authority.Actors()))
		}
		for _, actor := range authority.Actors() {
			cells, ok := want[actor]
			if !ok {
				t.Fatalf("%s: actor %s not transcribed", tc.r, actor)
			}
			for i, op := range authority.Operations(tc.r) {
				cell := cells[i]
				for _, scope := range []authority.Scope{{}, {Own: true}, {Cleanup: true}, {Tool: true}, {ExplicitTool: true}, {Proposal: true}} {
					var allowed bool
					switch cell {
					case "✅":
						allowed = true
					case "own":
						allowed = scope.Own
					case "cleanup":
						allowed = scope.Cleanup
					case "tool":
						allowed = scope.Tool
					case "xtool":
						allowed = scope.ExplicitTool
					case "prop":
						allowed = scope.Proposal
					case "❌", "-", "meta", "gw":
						allowed = false
					default:
						t.Fatalf("bad cell %q", cell)
					}
					err := authority.Check(actor, tc.r, op, scope)
					if allowed != (err == nil) {
						t.Errorf("%s %s by %s (scope %+v): err = %v, spec says allowed=%v", op, tc.r, actor, scope, err, allowed)
					}
					if err != nil {
						var fe *authority.ForbiddenError
						if !errors.As(err, &fe) || fe.Code() != "FORBIDDEN" || !errors.Is(err, authority.ErrForbidden) ||
							!errors.Is(err, lifecycle.ErrForbiddenActor) || fe.Actor != actor || fe.Operation != op {
							t.Errorf("%s %s by %s: error %v is not a proper FORBIDDEN", op, tc.r, actor, err)
						}
					}
				}
				if known := authority.Known(actor, tc.r); known != (cell != "-") {
					t.Errorf("Known(%s, %s) = %v", actor, tc.r, known)
				}
			}
		}
	}
}

func TestUnknownActorAndOperation(t *testing.T) {
	t.Parallel()
	if err := authority.Check("intruder", authority.Jobs, authority.Read, authority.Scope{Own: true, Cleanup: true}); err == nil {
		t.Error("unknown actor allowed")
	}
	if err := authority.Check(lifecycle.ActorOrchestration, authority.Jobs, authority.Modify, authority.Scope{}); err == nil {
		t.Error("an operation of the other table allowed")
	}
	if authority.Lookup(lifecycle.ActorAdmin, "runs", authority.Read) != authority.Denied {
		t.Error("unknown resource allowed")
	}
}

func TestTableIsACopy(t *testing.T) {
	t.Parallel()
	rows := authority.Table(authority.Jobs)
	rows[0].Cells[authority.Delete] = authority.Allowed
	if authority.Check(rows[0].Actor, authority.Jobs, authority.Delete, authority.Scope{}) == nil {
		t.Fatal("editing Table's result changed the matrix")
	}
	if len(authority.Table(authority.Artifacts)) != 6 || len(authority.Table(authority.Jobs)) != 6 || len(authority.Table(authority.Memory)) != 5 {
		t.Fatal("the spec's tables have six, six and five rows")
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	err := authority.Check(lifecycle.ActorNLMBackend, authority.Jobs, authority.Read, authority.Scope{})
	if got := err.Error(); !strings.Contains(got, "FORBIDDEN") || !strings.Contains(got, "nlm-backend") || !strings.Contains(got, "own job") {
		t.Fatalf("error text %q", got)
	}
	err = authority.Check(lifecycle.ActorOrchestration, authority.Memory, authority.Write, authority.Scope{Proposal: true})
	if got := err.Error(); !strings.Contains(got, "memory") || !strings.Contains(got, "via gateway") {
		t.Fatalf("error text %q", got)
	}
	for p := authority.Denied; p <= authority.ViaGateway+1; p++ {
		if p.String() == "" {
			t.Errorf("Permission(%d) has no name", p)
		}
	}
}

func TestZoneGuest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		actor lifecycle.Actor
		zone  string
		ok    bool
	}{
		{authority.ZoneGuest("zone_abc"), "zone_abc", true},
		{"guest:", "", false},
		{"guest:../x", "", false},
		{lifecycle.ActorGateway, "", false},
	} {
		zone, ok := authority.GuestZone(tc.actor)
		if ok != tc.ok || (ok && zone != tc.zone) {
			t.Errorf("GuestZone(%q) = %q, %v", tc.actor, zone, ok)
		}
		for _, r := range []authority.Resource{authority.Jobs, authority.Artifacts, authority.Memory} {
			for _, op := range authority.Operations(r) {
				if authority.Check(tc.actor, r, op, authority.Scope{Own: true, Cleanup: true, Tool: true, ExplicitTool: true, Proposal: true}) == nil && tc.ok {
					t.Errorf("a guest may %s %s", op, r)
				}
			}
		}
	}
}
