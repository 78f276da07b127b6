package records_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

type keepInner struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type KeepEmbedded struct {
	E string `json:"e,omitempty"`
}

type keepDoc struct {
	lifecycle.Meta
	KeepEmbedded

	Name  string     `json:"name"`
	Opt   string     `json:"opt,omitempty"`
	In    *keepInner `json:"in,omitempty"`
	Plain int
	Dash  string `json:"-"`
}

// TestKeep: a record read and written again keeps the top-level members
// its type does not know, as read, after its own; a record without any
// encodes as it always did.
func TestKeep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stored string
		change       func(*keepDoc)
		want         string // the rewrite
		unknown      string
	}{{
		name:   "none: byte-identical to the plain encoding",
		stored: `{"version":3,"e":"x","name":"n","opt":"o","in":{"a":"1"},"Plain":2}`,
		want:   `{"version":3,"e":"x","name":"n","opt":"o","in":{"a":"1"},"Plain":2}`,
	}, {
		name:    "unknown kept in stored order, after the known ones",
		stored:  `{"zeta":{"k":[1,"}\"]",{}]},"name":"n","alpha":null,"version":1}`,
		change:  func(d *keepDoc) { d.Name = "m" },
		want:    `{"version":1,"name":"m","Plain":0,"zeta":{"k":[1,"}\"]",{}]},"alpha":null}`,
		unknown: `"zeta":{"k":[1,"}\"]",{}]},"alpha":null`,
	}, {
		name:    "known but emptied is not resurrected",
		stored:  `{"version":1,"e":"old","name":"n","opt":"old","in":{"a":"1"},"newer":1}`,
		change:  func(d *keepDoc) { d.E, d.Opt, d.In = "", "", nil },
		want:    `{"version":1,"name":"n","Plain":0,"newer":1}`,
		unknown: `"newer":1`,
	}, {
		name:   "names json.Unmarshal matches case folded are known",
		stored: `{"NAME":"n","Opt":"o","plain":1,"E":"e"}`,
		want:   `{"version":0,"e":"e","name":"n","opt":"o","Plain":1}`,
	}, {
		name:   "unknown nested in a known member is dropped: the member is the code's",
		stored: `{"name":"n","in":{"a":"1","deeper":true}}`,
		want:   `{"version":0,"name":"n","in":{"a":"1"},"Plain":0}`,
	}, {
		name:    "a member of a field the type never decodes is unknown",
		stored:  `{"name":"n","Dash":"d"}`,
		want:    `{"version":0,"name":"n","Plain":0,"Dash":"d"}`,
		unknown: `"Dash":"d"`,
	}, {
		name:    "white space and scalars",
		stored:  " {\n \"n\" : -1.5e3 ,\t\"t\":true,\"f\" :false, \"name\":\"n\" , \"s\" : \"a,b\" }\n",
		want:    `{"version":0,"name":"n","Plain":0,"n":-1.5e3,"t":true,"f":false,"s":"a,b"}`,
		unknown: `"n":-1.5e3,"t":true,"f":false,"s":"a,b"`,
	}, {
		name:    "an escaped name is kept, re-encoded",
		stored:  `{"new\u0041":1,"name":"n","na\u006de":"shadow"}`,
		want:    `{"version":0,"name":"shadow","Plain":0,"newA":1}`,
		unknown: `"newA":1`,
	}, {
		name:    "just under the bound",
		stored:  `{"big":"` + strings.Repeat("x", records.MaxUnknown-8) + `"}`,
		want:    `{"version":0,"name":"","Plain":0,"big":"` + strings.Repeat("x", records.MaxUnknown-8) + `"}`,
		unknown: `"big":"` + strings.Repeat("x", records.MaxUnknown-8) + `"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			if _, err := s.Put(t.Context(), "k.json", []byte(tc.stored), storage.IfNotExists()); err != nil {
				t.Fatal(err)
			}
			d, _, err := records.Read[keepDoc](t.Context(), s, "k.json")
			if err != nil {
				t.Fatal(err)
			}
			if d.Unknown != tc.unknown {
				t.Errorf("kept %s, want %s", d.Unknown, tc.unknown)
			}
			if tc.change != nil {
				tc.change(&d)
			}
			got, err := records.Encode(&d)
			if err != nil || string(got) != tc.want {
				t.Errorf("rewrite %s, %v\nwant       %s", got, err, tc.want)
			}
			if tc.unknown == "" {
				plain, _ := jsonenc.Marshal(&d)
				if string(got) != string(plain) {
					t.Errorf("no unknown members, yet %s is not %s", got, plain)
				}
			}
			// Read again, the rewrite keeps the same members: nothing grows.
			var again keepDoc
			if err := records.Keep("k.json", got, "", &again); err != nil || again.Unknown != d.Unknown {
				t.Errorf("re-read kept %s, %v; want %s", again.Unknown, err, d.Unknown)
			}
		})
	}
}

// TestKeepBound: more than MaxUnknown bytes of unknown members quarantine
// the record rather than being carried on by every rewrite.
func TestKeepBound(t *testing.T) {
	t.Parallel()
	for _, stored := range []string{
		`{"name":"n","big":"` + strings.Repeat("x", records.MaxUnknown) + `"}`,
		`{"a":"` + strings.Repeat("x", records.MaxUnknown/2) + `","b":"` + strings.Repeat("y", records.MaxUnknown/2) + `"}`,
		`{"big\u0041":"` + strings.Repeat("x", records.MaxUnknown) + `"}`,
	} {
		var d keepDoc
		err := records.Keep("k.json", []byte(stored), "v1", &d)
		var q *lifecycle.QuarantinedError
		if !errors.As(err, &q) || !errors.Is(err, records.ErrUnknownTooLarge) || q.Key != "k.json" || q.Version != "v1" || string(q.Data) != stored {
			t.Errorf("%.40s...: %v, want a quarantine for unknown members too large", stored, err)
		}
		if d.Unknown != "" {
			t.Errorf("%.40s...: kept %d bytes", stored, len(d.Unknown))
		}
	}
}

// TestCreateKeepsNothing: a created record holds only what this release
// writes, whatever the document it was made from had kept.
func TestCreateKeepsNothing(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	d := &keepDoc{Meta: lifecycle.Meta{Unknown: `"newer":1`}, Name: "n"}
	if _, err := records.Create(t.Context(), s, "k.json", d); err != nil {
		t.Fatal(err)
	}
	b, _, err := s.Get(t.Context(), "k.json")
	if err != nil || string(b) != `{"version":1,"name":"n","Plain":0}` || d.Unknown != "" {
		t.Errorf("created %s (%v), doc keeps %q", b, err, d.Unknown)
	}
}

// A job-sized record without unknown members: the cost Keep adds to every
// read of the engines.
func BenchmarkKeep(b *testing.B) {
	stored := []byte(`{"version":7,"e":"x","name":"` + strings.Repeat("n", 600) + `","opt":"o","in":{"a":"1","b":2},"Plain":2}`)
	b.ReportAllocs()
	for b.Loop() {
		var d keepDoc
		if err := records.Keep("k.json", stored, "", &d); err != nil || d.Unknown != "" {
			b.Fatal(err)
		}
	}
}
