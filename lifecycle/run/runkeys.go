package run

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
)

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
