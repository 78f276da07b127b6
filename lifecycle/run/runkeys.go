package run

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/runconveyor/conveyor/storage"
)

// Objects the Runner keeps beside the run folders of DESIGN.md §4. Every id
// is validated by the storage layout functions or here before it becomes a
// key.
const (
	// runIndexPrefix maps a run id to its agent: index/runs/{runId}.json.
	runIndexPrefix = "index/runs/"
	// activePrefix lists the runs not yet terminal, so recovery and polling
	// cost O(active runs): index/active/{slug}/{runId}.
	activePrefix = "index/active/"
	// idempotencyPrefix holds the idempotency records: idempotency/{sha256}.json.
	idempotencyPrefix = "idempotency/"
)

func runIndexKey(runID string) (string, error) {
	if err := storage.ValidateID("run id", runID); err != nil {
		return "", err
	}
	return runIndexPrefix + runID + ".json", nil
}

func activeKey(slug, runID string) (string, error) {
	if err := storage.ValidateID("agent slug", slug); err != nil {
		return "", err
	}
	if err := storage.ValidateID("run id", runID); err != nil {
		return "", err
	}
	return activePrefix + slug + "/" + runID, nil
}

// parseActiveKey splits index/active/{slug}/{runId}.
func parseActiveKey(key string) (slug, runID string, ok bool) {
	rest, found := strings.CutPrefix(key, activePrefix)
	if !found {
		return "", "", false
	}
	slug, runID, found = strings.Cut(rest, "/")
	if !found || storage.ValidateID("agent slug", slug) != nil || storage.ValidateID("run id", runID) != nil {
		return "", "", false
	}
	return slug, runID, true
}

// slotKey is one of an agent's concurrency slots: agents/{slug}/slots/{n}.json.
func slotKey(slug string, n int) (string, error) {
	if err := storage.ValidateID("agent slug", slug); err != nil {
		return "", err
	}
	return "agents/" + slug + "/slots/" + strconv.Itoa(n) + ".json", nil
}

// runInputKey keeps a run's input, so any runner can resume it.
func runInputKey(slug, runID string) (string, error) {
	p, err := storage.RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	return p + "input.json", nil
}

// runIndexEntry is the body of index/runs/{runId}.json.
type runIndexEntry struct {
	AgentSlug string `json:"agent_slug"`
	Machine   string `json:"machine,omitempty"`
}

// slotEntry is the body of a slot: the run holding it, empty when free.
// Token is drawn afresh for every write: slots are fenced by compare-and-swap
// on their version, and on S3 a version is the MD5 of the bytes, so two
// writes of the same holder must still differ in their bytes (else a lost
// runner's release could match a version written after it).
type slotEntry struct {
	RunID string `json:"run_id"`
	Token string `json:"token,omitempty"`
}

// slotBody encodes a slot held by runID ("" for a free slot) with a fresh
// token.
func slotBody(runID string) []byte {
	var t [8]byte
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails (Go 1.24+).
	b, _ := json.Marshal(slotEntry{RunID: runID, Token: hex.EncodeToString(t[:])})
	return b
}
