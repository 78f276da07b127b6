package artifact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Type is an artifact's content type (docs/spec.md#artifact).
type Type = lifecycle.ArtifactType

// The built-in content types (docs/spec.md#artifact).
const (
	ResearchBrief        Type = "RESEARCH_BRIEF"
	Brief                Type = "BRIEF"
	PreprocessedProposal Type = "PREPROCESSED_PROPOSAL"
)

// builtinTypes lists the built-in content types in the spec's order.
func builtinTypes() []Type { return []Type{ResearchBrief, Brief, PreprocessedProposal} }

// TypeForJob is the built-in content type a built-in job type produces:
// RESEARCH → RESEARCH_BRIEF, BRIEF → BRIEF, PROPOSAL_PREPROCESS →
// PREPROCESSED_PROPOSAL; false for any other job type (a job type of the
// user's names its artifacts' type itself).
func TypeForJob(t lifecycle.JobType) (Type, bool) {
	switch t {
	case lifecycle.JobResearch:
		return ResearchBrief, true
	case lifecycle.JobBrief:
		return Brief, true
	case lifecycle.JobProposalPreprocess:
		return PreprocessedProposal, true
	}
	return "", false
}

// ErrInvalidArtifact matches every refusal of bad input: an unknown type,
// content that breaks its type's schema, an invalid id.
var ErrInvalidArtifact = errors.New("artifact: invalid artifact")

// validationError says which field of an artifact or its content is wrong.
// It matches ErrInvalidArtifact.
type validationError struct {
	Field  string // e.g. "content.sections[2].heading"
	Reason string
}

// Error renders the field and the reason.
func (e *validationError) Error() string {
	return "artifact: invalid " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidArtifact.
func (e *validationError) Unwrap() error { return ErrInvalidArtifact }

func invalid(field, format string, args ...any) error {
	return &validationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// section is one section of a research brief.
type section struct {
	Heading string   `json:"heading"`
	Body    string   `json:"body"`
	Sources []string `json:"sources,omitempty"`
}

// researchBriefContent is the content of a RESEARCH_BRIEF (docs/spec.md#artifact).
type researchBriefContent struct {
	Title         string    `json:"title"`
	Summary       string    `json:"summary"`
	Sections      []section `json:"sections"`
	Conclusions   []string  `json:"conclusions"`
	OpenQuestions []string  `json:"open_questions"`
}

// briefContent is the content of a BRIEF (docs/spec.md#artifact).
type briefContent struct {
	Title     string            `json:"title"`
	Body      string            `json:"body"`
	EntityMap map[string]string `json:"entity_map"`
	WordCount int               `json:"word_count"`
}

// issue is a problem found in a proposal draft.
type issue struct {
	Field    string `json:"field"`
	Severity string `json:"severity"` // "info", "warning" or "error"
	Message  string `json:"message"`
}

// entityMatch links text of a proposal to an entity.
type entityMatch struct {
	Text       string  `json:"text"`
	EntityID   string  `json:"entity_id"`
	Confidence float64 `json:"confidence"` // 0..1
}

// preprocessedProposalContent is the content of a PREPROCESSED_PROPOSAL
// (docs/spec.md#artifact). Original and Enriched are the drafts, JSON objects of
// any shape.
type preprocessedProposalContent struct {
	Original      json.RawMessage `json:"original"`
	Enriched      json.RawMessage `json:"enriched"`
	Issues        []issue         `json:"issues"`
	EntityMatches []entityMatch   `json:"entity_matches"`
}

// decodeStrict decodes one JSON object into v, refusing unknown fields and
// trailing data.
func decodeStrict(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return invalid("content", "missing")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("content", "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("content", "trailing data after the JSON object")
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// ValidateContent checks raw against the content schema of t
// (docs/spec.md#artifact): a single JSON object with exactly the type's fields, and
//
//   - RESEARCH_BRIEF: title and summary set; every section has a heading
//     and a body.
//   - BRIEF: title and body set; word_count not negative; entity_map keys
//     not empty.
//   - PREPROCESSED_PROPOSAL: original and enriched are JSON objects; every
//     issue has a field, a message and a severity of info, warning or
//     error; every entity match has an entity_id and a confidence in 0..1.
//
// Lists may be empty or absent. Errors match ErrInvalidArtifact.
func ValidateContent(t Type, raw []byte) error {
	switch t {
	case ResearchBrief:
		return validateResearchBrief(raw)
	case Brief:
		return validateBrief(raw)
	case PreprocessedProposal:
		return validatePreprocessedProposal(raw)
	default:
		return invalid("type", "%q is not RESEARCH_BRIEF, BRIEF or PREPROCESSED_PROPOSAL", string(t))
	}
}

func validateResearchBrief(raw []byte) error {
	var c researchBriefContent
	if err := decodeStrict(raw, &c); err != nil {
		return err
	}
	if c.Title == "" {
		return invalid("content.title", "empty")
	}
	if c.Summary == "" {
		return invalid("content.summary", "empty")
	}
	for i, s := range c.Sections {
		if s.Heading == "" {
			return invalid(fmt.Sprintf("content.sections[%d].heading", i), "empty")
		}
		if s.Body == "" {
			return invalid(fmt.Sprintf("content.sections[%d].body", i), "empty")
		}
	}
	return nil
}

func validateBrief(raw []byte) error {
	var c briefContent
	if err := decodeStrict(raw, &c); err != nil {
		return err
	}
	if c.Title == "" {
		return invalid("content.title", "empty")
	}
	if c.Body == "" {
		return invalid("content.body", "empty")
	}
	if c.WordCount < 0 {
		return invalid("content.word_count", "negative (%d)", c.WordCount)
	}
	for k := range c.EntityMap {
		if k == "" {
			return invalid("content.entity_map", "empty entity slug")
		}
	}
	return nil
}

func validatePreprocessedProposal(raw []byte) error {
	var c preprocessedProposalContent
	if err := decodeStrict(raw, &c); err != nil {
		return err
	}
	if !isObject(c.Original) {
		return invalid("content.original", "not a JSON object")
	}
	if !isObject(c.Enriched) {
		return invalid("content.enriched", "not a JSON object")
	}
	for i, is := range c.Issues {
		f := fmt.Sprintf("content.issues[%d]", i)
		switch {
		case is.Field == "":
			return invalid(f+".field", "empty")
		case is.Message == "":
			return invalid(f+".message", "empty")
		case is.Severity != "info" && is.Severity != "warning" && is.Severity != "error":
			return invalid(f+".severity", "%q is not info, warning or error", is.Severity)
		}
	}
	for i, m := range c.EntityMatches {
		f := fmt.Sprintf("content.entity_matches[%d]", i)
		if m.EntityID == "" {
			return invalid(f+".entity_id", "empty")
		}
		if math.IsNaN(m.Confidence) || m.Confidence < 0 || m.Confidence > 1 {
			return invalid(f+".confidence", "%v is outside 0..1", m.Confidence)
		}
	}
	return nil
}
