package artifact_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/runconveyor/conveyor/artifact"
)

func TestValidateContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		typ     artifact.Type
		content string
		field   string // "" means valid
	}{
		{"research ok", artifact.ResearchBrief, `{"title":"Research Brief: x","summary":"s","sections":[{"heading":"h","body":"b","sources":["ref1"]}],"conclusions":["c"],"open_questions":["q"]}`, ""},
		{"research minimal", artifact.ResearchBrief, `{"title":"t","summary":"s"}`, ""},
		{"research no title", artifact.ResearchBrief, `{"summary":"s"}`, "content.title"},
		{"research no summary", artifact.ResearchBrief, `{"title":"t","summary":""}`, "content.summary"},
		{"research section heading", artifact.ResearchBrief, `{"title":"t","summary":"s","sections":[{"heading":"","body":"b"}]}`, "content.sections[0].heading"},
		{"research section body", artifact.ResearchBrief, `{"title":"t","summary":"s","sections":[{"heading":"h","body":"b"},{"heading":"h"}]}`, "content.sections[1].body"},
		{"research unknown field", artifact.ResearchBrief, `{"title":"t","summary":"s","extra":1}`, "content"},
		{"brief ok", artifact.Brief, `{"title":"t","body":"b","entity_map":{"entity-slug":"Назва"},"word_count":350}`, ""},
		{"brief negative words", artifact.Brief, `{"title":"t","body":"b","word_count":-1}`, "content.word_count"},
		{"brief empty slug", artifact.Brief, `{"title":"t","body":"b","entity_map":{"":"x"}}`, "content.entity_map"},
		{"brief no body", artifact.Brief, `{"title":"t"}`, "content.body"},
		{"brief wrong type", artifact.Brief, `{"title":1,"body":"b"}`, "content"},
		{"proposal ok", artifact.PreprocessedProposal, `{"original":{"a":1},"enriched":{"a":2},"issues":[{"field":"target","severity":"warning","message":"m"}],"entity_matches":[{"text":"t","entity_id":"e","confidence":0.91}]}`, ""},
		{"proposal original not object", artifact.PreprocessedProposal, `{"original":[1],"enriched":{}}`, "content.original"},
		{"proposal no enriched", artifact.PreprocessedProposal, `{"original":{}}`, "content.enriched"},
		{"proposal severity", artifact.PreprocessedProposal, `{"original":{},"enriched":{},"issues":[{"field":"f","severity":"fatal","message":"m"}]}`, "content.issues[0].severity"},
		{"proposal issue message", artifact.PreprocessedProposal, `{"original":{},"enriched":{},"issues":[{"field":"f","severity":"info"}]}`, "content.issues[0].message"},
		{"proposal confidence", artifact.PreprocessedProposal, `{"original":{},"enriched":{},"entity_matches":[{"text":"t","entity_id":"e","confidence":1.5}]}`, "content.entity_matches[0].confidence"},
		{"proposal entity id", artifact.PreprocessedProposal, `{"original":{},"enriched":{},"entity_matches":[{"text":"t","confidence":0.5}]}`, "content.entity_matches[0].entity_id"},
		{"unknown type", "SUMMARY", `{}`, "type"},
		{"empty", artifact.Brief, ``, "content"},
		{"not an object", artifact.Brief, `"x"`, "content"},
		{"trailing data", artifact.Brief, `{"title":"t","body":"b"} {}`, "content"},
	}
	for _, tt := range tests {
		err := artifact.ValidateContent(tt.typ, []byte(tt.content))
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		var ve *artifact.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, artifact.ErrInvalidArtifact) {
			t.Errorf("%s: got %v, want a ValidationError on %s", tt.name, err, tt.field)
		}
	}
}

// FuzzValidateContent: ValidateContent never panics, and content it accepts
// is a JSON object that decodes into its type's struct.
func FuzzValidateContent(f *testing.F) {
	f.Add(0, []byte(`{"title":"t","summary":"s","sections":[{"heading":"h","body":"b"}]}`))
	f.Add(1, []byte(`{"title":"t","body":"b","entity_map":{"e":"E"},"word_count":3}`))
	f.Add(2, []byte(`{"original":{},"enriched":{},"issues":[],"entity_matches":[{"text":"t","entity_id":"e","confidence":0.5}]}`))
	f.Add(2, []byte(`{"original":{},"enriched":{`))
	f.Fuzz(func(t *testing.T, which int, raw []byte) {
		types := artifact.Types()
		typ := types[((which%len(types))+len(types))%len(types)]
		if err := artifact.ValidateContent(typ, raw); err != nil {
			if !errors.Is(err, artifact.ErrInvalidArtifact) {
				t.Fatalf("error %v does not match ErrInvalidArtifact", err)
			}
			return
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("accepted content is not a JSON object: %v", err)
		}
	})
}
