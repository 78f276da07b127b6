package layout

import (
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
)

// The proposals' folders: the records, and the index of the pending ones,
// newest first (an entry is NewestFirst(created_at, id)), which a
// proposal leaves when it is applied or rejected.
const (
	ProposalsPrefix       = "proposals/"
	ProposalsPendingIndex = "index/proposals-pending/"
)

// ProposalKey is a proposal record: proposals/{id}.json.
func ProposalKey(id string) (string, error) {
	if err := storekey.ValidateID("proposal id", id); err != nil {
		return "", err
	}
	return ProposalsPrefix + id + ".json", nil
}

// ProposalPendingKey is a pending proposal's index entry:
// index/proposals-pending/{NewestFirst(created, id)}.
func ProposalPendingKey(created time.Time, id string) (string, error) {
	if err := storekey.ValidateID("proposal id", id); err != nil {
		return "", err
	}
	e, err := NewestFirst(created, id)
	if err != nil {
		return "", err
	}
	return ProposalsPendingIndex + e, nil
}

// ParseProposalPendingEntry returns the proposal id of an entry of the
// pending index (a key less ProposalsPendingIndex), or false.
func ParseProposalPendingEntry(entry string) (id string, ok bool) {
	_, id, ok = ParseNewestFirst(entry)
	return id, ok && storekey.ValidateID("proposal id", id) == nil
}

// ParseProposalKey returns the id of a proposal record's key
// (ProposalKey), or false.
func ParseProposalKey(key string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(key, ProposalsPrefix)
	if !ok {
		return "", false
	}
	id, ok = strings.CutSuffix(rest, ".json")
	return id, ok && !strings.Contains(id, "/") && storekey.ValidateID("proposal id", id) == nil
}
