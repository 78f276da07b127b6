package artifact_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
)

// TestCreateRefusesBadText sends every free-text field of a Draft an
// oversized, an invalid-UTF-8 and a NUL value, and checks the typed error,
// its code and that the store did not change (issue 10 F).
func TestCreateRefusesBadText(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	a := newStore(t, s, clock.NewFake(t0))
	ctx := context.Background()
	if _, _, err := a.Create(ctx, lifecycle.ActorNLMBackend, "proj", draft("job-0")); err != nil {
		t.Fatal(err)
	}
	inputs := []struct {
		field string
		limit int
		set   func(d *artifact.Draft, v string)
	}{
		{"tags[1]", codes.MaxNameBytes, func(d *artifact.Draft, v string) { d.Tags = []string{"t", v} }},
		{"entity_refs[0]", codes.MaxRefBytes, func(d *artifact.Draft, v string) { d.EntityRefs = []string{v} }},
		{"sources[0].ref", codes.MaxRefBytes, func(d *artifact.Draft, v string) { d.Sources[0].Ref = v }},
		{"sources[0].excerpt", codes.MaxTextBytes, func(d *artifact.Draft, v string) { d.Sources[0].Excerpt = v }},
		{"content", codes.MaxDocumentBytes, func(d *artifact.Draft, v string) {
			d.Content = json.RawMessage(`{"title":"t","body":"` + v + `","entity_map":{},"word_count":1}`)
		}},
	}
	bad := []struct{ name, value, code string }{
		{"oversized", "", codes.InputTooLarge}, // value: limit+1 bytes, below
		{"invalid UTF-8", "ok\xff\xfe", codes.InvalidInput},
		{"NUL", "ok\x00ok", codes.InvalidInput},
	}
	for i, in := range inputs {
		for j, bv := range bad {
			t.Run(in.field+"/"+bv.name, func(t *testing.T) {
				v := bv.value
				if v == "" {
					v = strings.Repeat("x", in.limit+1)
				}
				// A job of its own per case, so that without the checks each
				// shows what it would write.
				d := draft(fmt.Sprintf("job-%d-%d", i, j))
				in.set(&d, v)
				before := teststores.Snapshot(t, s)
				_, created, err := a.Create(ctx, lifecycle.ActorNLMBackend, "proj", d)
				var ie *lifecycle.InputError
				if created || !errors.Is(err, artifact.ErrInvalidArtifact) || !errors.As(err, &ie) || ie.Field != in.field {
					t.Errorf("created %v, err %.300v: want ErrInvalidArtifact with an *InputError for %s", created, err, in.field)
				}
				if got := lifecycle.ErrorCode(err); got != bv.code {
					t.Errorf("code %s, want %s", got, bv.code)
				}
				teststores.Unchanged(t, s, before)
			})
		}
	}
	for _, field := range []string{"tags", "entity_refs", "sources"} {
		t.Run("too many "+field, func(t *testing.T) {
			d := draft("job-many-" + field)
			many := make([]string, codes.MaxListLen+1)
			for i := range many {
				many[i] = "x"
			}
			switch field {
			case "tags":
				d.Tags = many
			case "entity_refs":
				d.EntityRefs = many
			case "sources":
				d.Sources = make([]lifecycle.SourceRef, len(many))
				for i := range d.Sources {
					d.Sources[i].Ref = "x"
				}
			}
			before := teststores.Snapshot(t, s)
			_, _, err := a.Create(ctx, lifecycle.ActorNLMBackend, "proj", d)
			if lifecycle.ErrorCode(err) != codes.InputTooLarge || !errors.Is(err, artifact.ErrInvalidArtifact) {
				t.Errorf("%d %s: %v", len(many), field, err)
			}
			teststores.Unchanged(t, s, before)
		})
	}
}
