package layout_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/storage"
)

// specIDs are ids as docs/spec.md#records writes them; all must pass.
var specIDs = []string{
	"run_2026-02-14_080000_abc123",
	"run_2026-02-24_abc123",
	"archivist-violin",
	"architect-guardian",
	"inbox_2026-02-14_abc123",
	"550e8400-e29b-41d4-a716-446655440000",
	"art-uuid",
	"art-550e8400-e29b-41d4-a716-446655440000",
	"github:12345678-1234-1234-1234-123456789012",
	"api:cli-abc123:req-550e8400-e29b-41d4-a716-446655440000",
	"slack:T12345678:1234567890.123456",
	"scheduler:daily-cleanup:2024-12-19T00:00:00Z",
	"context", "proposal.json",
}

var badIDs = []string{
	"", "../x", "..", ".", ".hidden", "a..b", "a/b", `a\b`, "a b", "tab\t", "nl\n", "nul\x00",
	"ключ", "a%2F", strings.Repeat("x", 2048), strings.Repeat("x", storekey.MaxIDLen+1),
}

func TestValidateID(t *testing.T) {
	t.Parallel()
	for _, id := range specIDs {
		if err := storekey.ValidateID("id", id); err != nil {
			t.Errorf("spec id %q refused: %v", id, err)
		}
	}
	for _, id := range badIDs {
		err := storekey.ValidateID("run id", id)
		var ie *storekey.IDError
		if !errors.Is(err, storage.ErrInvalidID) || !errors.As(err, &ie) || ie.Field != "run id" {
			t.Errorf("ValidateID(%q) = %v, want an *IDError for run id", id, err)
			continue
		}
		if len(err.Error()) > 200 {
			t.Errorf("error for a %d-byte id is %d bytes long", len(id), len(err.Error()))
		}
	}
}

func TestLayout(t *testing.T) {
	t.Parallel()
	const slug, run = "archivist-violin", "run_2026-02-14_080000_abc123"
	ts := time.Date(2026, 2, 24, 23, 59, 59, 0, time.FixedZone("UTC+2", 2*3600)) // 21:59:59Z
	tests := []struct {
		name string
		key  func() (string, error)
		want string
	}{
		{"status", func() (string, error) { return layout.RunStatusKey(slug, run) }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/status.json"},
		{"manifest", func() (string, error) { return layout.RunManifestKey(slug, run) }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/manifest.json"},
		{"step", func() (string, error) { return layout.RunStepKey(slug, run, 1, "context") }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/steps/01-context.json"},
		{"step 12", func() (string, error) { return layout.RunStepKey(slug, run, 12, "persist") }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/steps/12-persist.json"},
		{"output", func() (string, error) { return layout.RunOutputKey(slug, run, "proposal.json") }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/output/proposal.json"},
		{"run prefix", func() (string, error) { return layout.RunPrefix(slug, run) }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/"},
		{"agent runs", func() (string, error) { return layout.AgentRunsPrefix(slug) }, "agents/archivist-violin/runs/"},
		{"steps prefix", func() (string, error) { return layout.RunStepsPrefix(slug, run) }, "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/steps/"},
		{"job", func() (string, error) { return layout.JobKey("550e8400-e29b-41d4-a716-446655440000") }, "jobs/550e8400-e29b-41d4-a716-446655440000.json"},
		{"artifact", func() (string, error) { return layout.ArtifactKey("cid-1", "art-uuid") }, "projects/cid-1/artifacts/art-uuid.json"},
		{"inbox", func() (string, error) { return layout.InboxKey("inbox_2026-02-14_abc123") }, "inbox/inbox_2026-02-14_abc123.json"},
		{"inbox expired", func() (string, error) { return layout.InboxExpiredKey("inbox_2026-02-14_abc123") }, "inbox/expired/inbox_2026-02-14_abc123.json"},
		{"audit", func() (string, error) { return layout.AuditKey(ts, "evt-1") }, "audit/20260224/evt-1.json"},
	}
	for _, tc := range tests {
		got, err := tc.key()
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.name, got, err, tc.want)
			continue
		}
		if strings.HasSuffix(got, "/") {
			got += "x"
		}
		if err := storekey.ValidateKey(got); err != nil {
			t.Errorf("%s produced an invalid key: %v", tc.name, err)
		}
	}
}

// TestLayoutRefusesBadIDs: every layout function checks every id it puts in
// a key, and returns no key with the error.
func TestLayoutRefusesBadIDs(t *testing.T) {
	t.Parallel()
	const ok = "ok-id"
	for _, bad := range badIDs {
		fns := map[string]func() (string, error){
			"status/slug":     func() (string, error) { return layout.RunStatusKey(bad, ok) },
			"status/run":      func() (string, error) { return layout.RunStatusKey(ok, bad) },
			"manifest":        func() (string, error) { return layout.RunManifestKey(ok, bad) },
			"step/name":       func() (string, error) { return layout.RunStepKey(ok, ok, 1, bad) },
			"step/run":        func() (string, error) { return layout.RunStepKey(ok, bad, 1, ok) },
			"output":          func() (string, error) { return layout.RunOutputKey(ok, ok, bad) },
			"agent runs":      func() (string, error) { return layout.AgentRunsPrefix(bad) },
			"job":             func() (string, error) { return layout.JobKey(bad) },
			"artifact/cid":    func() (string, error) { return layout.ArtifactKey(bad, ok) },
			"artifact/id":     func() (string, error) { return layout.ArtifactKey(ok, bad) },
			"inbox":           func() (string, error) { return layout.InboxKey(bad) },
			"inbox expired":   func() (string, error) { return layout.InboxExpiredKey(bad) },
			"audit":           func() (string, error) { return layout.AuditKey(time.Now(), bad) },
			"steps prefix":    func() (string, error) { return layout.RunStepsPrefix(bad, ok) },
			"run prefix/slug": func() (string, error) { return layout.RunPrefix(bad, ok) },
		}
		for name, fn := range fns {
			key, err := fn()
			if !errors.Is(err, storage.ErrInvalidID) || key != "" {
				t.Errorf("%s with id %.20q = %q, %v; want no key and ErrInvalidID", name, bad, key, err)
			}
		}
	}
	for _, n := range []int{-1, 100} {
		if _, err := layout.RunStepKey(ok, ok, n, ok); !errors.Is(err, storage.ErrInvalidID) {
			t.Errorf("step number %d accepted", n)
		}
	}
}

// FuzzValidateID: an accepted id is one safe key segment.
func FuzzValidateID(f *testing.F) {
	for _, id := range append(specIDs, badIDs...) {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if storekey.ValidateID("id", id) != nil {
			return
		}
		if strings.ContainsAny(id, "/\\") || strings.Contains(id, "..") || strings.HasPrefix(id, ".") || len(id) > storekey.MaxIDLen {
			t.Fatalf("accepted unsafe id %q", id)
		}
		key, err := layout.JobKey(id)
		if err != nil || key != "jobs/"+id+".json" || storekey.ValidateKey(key) != nil {
			t.Fatalf("JobKey(%q) = %q, %v", id, key, err)
		}
	})
}

// TestQueueKeys: the job queue's internal keys live under queue/, never
// under jobs/, and parse back.
func TestQueueKeys(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 24, 10, 0, 0, 5, time.UTC)
	lane, err := layout.LaneKey("agent-a", at, "job-1")
	if err != nil || lane != "queue/lanes/agent-a/1771927200000000005-job-1" {
		t.Fatalf("LaneKey = %q, %v", lane, err)
	}
	agent, got, id, ok := layout.ParseLaneKey(lane)
	if !ok || agent != "agent-a" || !got.Equal(at) || id != "job-1" {
		t.Fatalf("ParseLaneKey = %q %v %q %v", agent, got, id, ok)
	}
	lock, _ := layout.AgentLockKey("agent-a")
	if a, ok := layout.AgentFromLockKey(lock); !ok || a != "agent-a" || lock != "queue/agents/agent-a.json" {
		t.Fatalf("AgentLockKey = %q → %q %v", lock, a, ok)
	}
	for _, k := range []string{lane, lock, layout.SweepLeaseKey} {
		if strings.HasPrefix(k, layout.JobsPrefix) || !strings.HasPrefix(k, layout.QueuePrefix) {
			t.Errorf("%s is not under %s", k, layout.QueuePrefix)
		}
		if _, ok := layout.JobIDFromKey(k); ok {
			t.Errorf("%s reads as a job key", k)
		}
	}
	tests := []struct {
		name string
		fn   func() error
	}{
		{"lane agent", func() error { _, err := layout.LaneKey("a/b", at, "j"); return err }},
		{"lane job", func() error { _, err := layout.LaneKey("a", at, ".."); return err }},
		{"lane before 1970", func() error { _, err := layout.LaneKey("a", time.Unix(-1, 0), "j"); return err }},
		{"lock agent", func() error { _, err := layout.AgentLockKey("../x"); return err }},
		{"lane prefix agent", func() error { _, err := layout.LanePrefix(""); return err }},
	}
	for _, tt := range tests {
		if err := tt.fn(); !errors.Is(err, storage.ErrInvalidID) {
			t.Errorf("%s: %v, want ErrInvalidID", tt.name, err)
		}
	}
	for _, bad := range []string{"queue/lanes/a/123-j", "queue/lanes/a/x234567890123456789-j", "jobs/queue/a/1771927200000000005-j", "queue/lanes/a"} {
		if _, _, _, ok := layout.ParseLaneKey(bad); ok {
			t.Errorf("ParseLaneKey(%q) ok", bad)
		}
	}
	if id, ok := layout.JobIDFromKey("jobs/job-1.json"); !ok || id != "job-1" {
		t.Fatalf("JobIDFromKey = %q %v", id, ok)
	}
}

// TestAuditEventIDOneScheme: ids with a subject are the same on every try
// and sort by time, then seq, then i; ids without one are fresh.
func TestAuditEventIDOneScheme(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	a := records.AuditEventID(ts, "job-1", 2, 0)
	if a != records.AuditEventID(ts, "job-1", 2, 0) || a == records.AuditEventID(ts, "job-2", 2, 0) {
		t.Fatalf("subject ids not deterministic per subject: %s", a)
	}
	order := []string{
		records.AuditEventID(ts, "job-1", 2, 0), records.AuditEventID(ts, "job-1", 2, 1),
		records.AuditEventID(ts, "job-1", 3, 0), records.AuditEventID(ts.Add(time.Nanosecond), "job-1", 1, 0),
	}
	if !slices.IsSorted(order) {
		t.Fatalf("ids out of order: %v", order)
	}
	r := records.NewAuditEventID(ts)
	if r == records.NewAuditEventID(ts) || len(r) != len(a) || storekey.ValidateID("audit event id", r) != nil {
		t.Fatalf("random id %q (subject id %q)", r, a)
	}
}

func TestRunnerKeys(t *testing.T) {
	t.Parallel()
	mustKey := func(k string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := storekey.ValidateKey(k); err != nil {
			t.Fatalf("%q is not a valid key: %v", k, err)
		}
		return k
	}
	tests := []struct{ got, want string }{
		{mustKey(layout.RunIndexKey("run_1")), "index/runs/run_1.json"},
		{mustKey(layout.RunActiveKey("agent-a", "run_1")), "index/active/agent-a/run_1"},
		{mustKey(layout.RunSlotKey("agent-a", 2)), "agents/agent-a/slots/2.json"},
		{mustKey(layout.RunInputKey("agent-a", "run_1")), "agents/agent-a/runs/run_1/input.json"},
		{mustKey(layout.NLMJobKey("job-1")), "nlm/jobs/job-1.json"},
		{mustKey(layout.NLMActiveKey("job-1")), "nlm/active/job-1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("key %q, want %q", tt.got, tt.want)
		}
	}
	if p, err := layout.ArtifactsPrefix("cid-1"); err != nil || p != "projects/cid-1/artifacts/" || storekey.ValidatePrefix(p) != nil {
		t.Errorf("ArtifactsPrefix = %q, %v", p, err)
	}
	if k := layout.IdempotencyKey("../../etc/passwd"); !strings.HasPrefix(k, layout.IdempotencyPrefix) || storekey.ValidateKey(k) != nil {
		t.Errorf("IdempotencyKey of a hostile client key: %q", k)
	}
	if slug, runID, ok := layout.ParseRunActiveKey("index/active/agent-a/run_1"); !ok || slug != "agent-a" || runID != "run_1" {
		t.Errorf("ParseRunActiveKey = %q %q %v", slug, runID, ok)
	}
	for _, bad := range []func() (string, error){
		func() (string, error) { return layout.RunIndexKey("../x") },
		func() (string, error) { return layout.RunActiveKey("a/b", "run_1") },
		func() (string, error) { return layout.RunSlotKey("agent-a", -1) },
		func() (string, error) { return layout.NLMJobKey("") },
	} {
		if k, err := bad(); !errors.Is(err, storage.ErrInvalidID) {
			t.Errorf("bad id gave %q, %v; want ErrInvalidID", k, err)
		}
	}
	if _, _, ok := layout.ParseRunActiveKey("index/active/agent-a"); ok {
		t.Error("ParseRunActiveKey accepted a key without a run id")
	}
}

func TestWebhookKeys(t *testing.T) {
	t.Parallel()
	k, err := layout.GitHubDeliveryKey("72d3162e-cc78-11e3-81ab-4c9367dc0958")
	if err != nil || k != "webhooks/github/deliveries/72d3162e-cc78-11e3-81ab-4c9367dc0958.json" || storekey.ValidateKey(k) != nil {
		t.Errorf("GitHubDeliveryKey = %q, %v", k, err)
	}
	for _, bad := range badIDs {
		if k, err := layout.GitHubDeliveryKey(bad); !errors.Is(err, storage.ErrInvalidID) {
			t.Errorf("GitHubDeliveryKey(%q) = %q, %v; want ErrInvalidID", bad, k, err)
		}
	}
	// A window's key is valid whatever the repository's name holds, and the
	// three parts cannot run into each other.
	a := layout.GitHubWindowKey("octo/repo", 12, "pull_request.opened")
	for _, other := range []string{
		layout.GitHubWindowKey("octo/repo", 1, "2pull_request.opened"),
		layout.GitHubWindowKey("octo/repo", 12, "pull_request.closed"),
		layout.GitHubWindowKey("octo/repo1", 2, "pull_request.opened"),
	} {
		if other == a {
			t.Errorf("two subjects share the window key %q", a)
		}
	}
	if !strings.HasPrefix(a, layout.GitHubWindowsPrefix) || storekey.ValidateKey(a) != nil || a != layout.GitHubWindowKey("octo/repo", 12, "pull_request.opened") {
		t.Errorf("GitHubWindowKey = %q", a)
	}
	if k := layout.GitHubWindowKey("../../x\x00y", -1, "a/b"); storekey.ValidateKey(k) != nil {
		t.Errorf("GitHubWindowKey of hostile parts: %q", k)
	}
}

// Every key a package reads back is parsed here, by the inverse of its
// builder: a built key parses to its ids, other shapes do not.
func TestParsersInvertBuilders(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)
	inbox, _ := layout.InboxKey("inbox_2026-02-14_abc123")
	expired, _ := layout.InboxExpiredKey("inbox_2026-02-14_abc123")
	status, _ := layout.RunStatusKey("archivist-violin", "run_2026-02-24_abc123")
	manifest, _ := layout.RunManifestKey("archivist-violin", "run_2026-02-24_abc123")
	slot, _ := layout.RunSlotKey("archivist-violin", 3)
	nlmJob, _ := layout.NLMJobKey("550e8400-e29b-41d4-a716-446655440000")
	nlmActive, _ := layout.NLMActiveKey("550e8400-e29b-41d4-a716-446655440000")
	audit, _ := layout.AuditKey(day, "evt-1")

	if id, ok := layout.ParseInboxKey(inbox); !ok || id != "inbox_2026-02-14_abc123" {
		t.Errorf("ParseInboxKey(%q) = %q, %v", inbox, id, ok)
	}
	if _, ok := layout.ParseInboxKey(expired); ok {
		t.Errorf("ParseInboxKey(%q): an expired entry is not live", expired)
	}
	if !layout.IsInboxExpiredKey(expired) || layout.IsInboxExpiredKey(inbox) {
		t.Errorf("IsInboxExpiredKey: %q true, %q false wanted", expired, inbox)
	}
	if slug, run, ok := layout.ParseRunStatusKey(status); !ok || slug != "archivist-violin" || run != "run_2026-02-24_abc123" {
		t.Errorf("ParseRunStatusKey(%q) = %q, %q, %v", status, slug, run, ok)
	}
	for _, k := range []string{manifest, slot, "agents/x/runs/a/b/status.json", "index/runs/x.json"} {
		if _, _, ok := layout.ParseRunStatusKey(k); ok {
			t.Errorf("ParseRunStatusKey(%q) accepted", k)
		}
	}
	if !layout.IsRunSlotKey(slot) || layout.IsRunSlotKey(status) {
		t.Errorf("IsRunSlotKey: %q true, %q false wanted", slot, status)
	}
	if id, ok := layout.ParseNLMJobKey(nlmJob); !ok || id != "550e8400-e29b-41d4-a716-446655440000" {
		t.Errorf("ParseNLMJobKey(%q) = %q, %v", nlmJob, id, ok)
	}
	if _, ok := layout.ParseNLMJobKey(nlmActive); ok {
		t.Errorf("ParseNLMJobKey(%q) accepted", nlmActive)
	}
	if id, ok := layout.ParseAuditKey(audit); !ok || id != "evt-1" {
		t.Errorf("ParseAuditKey(%q) = %q, %v", audit, id, ok)
	}
	for _, k := range []string{"audit/2026/x.json", "audit/20260214/x", "jobs/x.json"} {
		if _, ok := layout.ParseAuditKey(k); ok {
			t.Errorf("ParseAuditKey(%q) accepted", k)
		}
	}
}

// LaneAgent reads the agent of any key under the lanes, as the claim's
// grouping did by hand: of a LaneKey, and of whatever else is there.
func TestLaneAgent(t *testing.T) {
	t.Parallel()
	lane, _ := layout.LaneKey("agent-a", time.Unix(5, 0), "job-1")
	tests := []struct {
		key, agent string
		ok         bool
	}{
		{lane, "agent-a", true},
		{"queue/lanes/agent-b/anything", "agent-b", true},
		{"queue/lanes/agent-c", "", false},
		{"jobs/job-1.json", "", false},
	}
	for _, tt := range tests {
		if agent, ok := layout.LaneAgent(tt.key); ok != tt.ok || ok && agent != tt.agent {
			t.Errorf("LaneAgent(%q) = %q, %v, want %q, %v", tt.key, agent, ok, tt.agent, tt.ok)
		}
	}
}

func TestNewestFirst(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		at     time.Time
		id     string
		before string // an entry that must sort after (older)
	}{
		{"a second older sorts after", t0, "run_b", mustNewest(t, t0.Add(-time.Second), "run_a")},
		{"a nanosecond older sorts after", t0, "run_a", mustNewest(t, t0.Add(-time.Nanosecond), "run_z")},
		{"same time: by id", t0, "run_a", mustNewest(t, t0, "run_b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := mustNewest(t, tt.at, tt.id)
			if e >= tt.before {
				t.Fatalf("%q does not sort before %q", e, tt.before)
			}
			at, id, ok := layout.ParseNewestFirst(e)
			if !ok || !at.Equal(tt.at) || id != tt.id {
				t.Fatalf("ParseNewestFirst(%q) = %v, %q, %v", e, at, id, ok)
			}
			if got, ok := layout.DecodeCursor(layout.EncodeCursor(e)); !ok || got != e {
				t.Fatalf("cursor round trip: %q, %v", got, ok)
			}
		})
	}
	if _, err := layout.NewestFirst(time.Unix(-1, 0), "x"); err == nil {
		t.Error("a time before 1970 was accepted")
	}
	for _, bad := range []string{"", "123", "00000/00/00/0000000000-", "0000a/00/00/0000000000-x", "00000/00/00/0000000000-../x", "000000/000/0000000000-x"} {
		if _, _, ok := layout.ParseNewestFirst(bad); ok {
			t.Errorf("ParseNewestFirst(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "!!", layout.EncodeCursor("a//b")} {
		if _, ok := layout.DecodeCursor(bad); ok {
			t.Errorf("DecodeCursor(%q) accepted", bad)
		}
	}
	keys, err := layout.RunIndexKeys("demo", "run_1", "completed", t0)
	if err != nil || len(keys) != 4 {
		t.Fatalf("RunIndexKeys = %v, %v", keys, err)
	}
}

func mustNewest(t *testing.T, at time.Time, id string) string {
	t.Helper()
	e, err := layout.NewestFirst(at, id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRetentionParsers: the keys the retention janitor judges, parsed
// from what the builders make, and refused in any other shape.
func TestRetentionParsers(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 3, 4, 23, 59, 0, 0, time.UTC)
	audit, _ := layout.AuditKey(day, "evt-1")
	got, ok := layout.ParseAuditDay(audit)
	if !ok || !got.Equal(time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("ParseAuditDay(%q) = %s, %v", audit, got, ok)
	}
	expired, _ := layout.InboxExpiredKey("e-1")
	if id, ok := layout.ParseInboxExpiredKey(expired); !ok || id != "e-1" {
		t.Errorf("ParseInboxExpiredKey(%q) = %q, %v", expired, id, ok)
	}
	if !layout.IsIdempotencyKey(layout.IdempotencyKey("api:c:1")) {
		t.Error("IsIdempotencyKey refuses an IdempotencyKey")
	}
	art, _ := layout.ArtifactKey("proj", "art-1")
	if cid, id, ok := layout.ParseArtifactKey(art); !ok || cid != "proj" || id != "art-1" {
		t.Errorf("ParseArtifactKey(%q) = %q, %q, %v", art, cid, id, ok)
	}
	for _, k := range []string{"audit/2026030/x.json", "audit/2026x304/x.json", "audit/20261304/x.json", "audits/20260304/x.json", "audit/20260304"} {
		if _, ok := layout.ParseAuditDay(k); ok {
			t.Errorf("ParseAuditDay(%q) ok", k)
		}
	}
	for _, k := range []string{"inbox/e-1.json", "inbox/expired/a/b.json", "inbox/expired/e-1", "inbox/expired/.json"} {
		if _, ok := layout.ParseInboxExpiredKey(k); ok {
			t.Errorf("ParseInboxExpiredKey(%q) ok", k)
		}
	}
	for _, k := range []string{"idempotency/abc.json", "idempotency/" + strings.Repeat("g", 64) + ".json", "idempotency/" + strings.Repeat("a", 64), "index/runs/x.json"} {
		if layout.IsIdempotencyKey(k) {
			t.Errorf("IsIdempotencyKey(%q)", k)
		}
	}
	for _, k := range []string{"projects/p/artifacts/a", "projects/p/artifacts/a/b.json", "projects/p/other/a.json", "projects//artifacts/a.json", "artifacts/a.json"} {
		if _, _, ok := layout.ParseArtifactKey(k); ok {
			t.Errorf("ParseArtifactKey(%q) ok", k)
		}
	}
}

// TestAuditCursors: AuditAfter(t) sorts between the keys of the events
// stamped before t and those stamped at or after it, on t's day, and is a
// cursor ListAfter accepts; AuditKeyOfID finds the key records.Record
// writes for an id.
func TestAuditCursors(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 24, 10, 0, 0, 500, time.UTC)
	cur := layout.AuditAfter(at)
	if err := storekey.ValidatePrefix(cur); err != nil {
		t.Fatalf("AuditAfter = %q: %v", cur, err)
	}
	tests := []struct {
		ts    time.Time
		after bool
	}{
		{at.Add(-time.Nanosecond), false},
		{at.Add(-time.Hour), false},
		{at, true},
		{at.Add(time.Nanosecond), true},
	}
	for _, tc := range tests {
		id := records.AuditEventID(tc.ts, "job-1", 1, 0)
		key, ts, ok := layout.AuditKeyOfID(id)
		want, _ := layout.AuditKey(tc.ts, id)
		if !ok || key != want || !ts.Equal(tc.ts) {
			t.Errorf("AuditKeyOfID(%q) = %q, %v, %v; want %q", id, key, ts, ok, want)
		}
		if got := key > cur; got != tc.after {
			t.Errorf("key at %v sorts after AuditAfter(%v): %v, want %v", tc.ts, at, got, tc.after)
		}
		if got := id >= layout.AuditIDStamp(at); got != tc.after {
			t.Errorf("id at %v >= AuditIDStamp(%v): %v, want %v", tc.ts, at, got, tc.after)
		}
	}
	for _, bad := range []string{"", "evt-1", "2026-02-24T10:00:00Z-x", "20260224T100000.000000000Z-../x"} {
		if _, _, ok := layout.AuditKeyOfID(bad); ok {
			t.Errorf("AuditKeyOfID(%q) accepted", bad)
		}
	}
	if !strings.HasPrefix(layout.AuditDayPrefix(at), layout.AuditPrefix) {
		t.Errorf("day prefix %q outside %q", layout.AuditDayPrefix(at), layout.AuditPrefix)
	}
}

func TestIdempotencyRunKey(t *testing.T) {
	t.Parallel()
	k, err := layout.IdempotencyRunKey("api:c:1", "run_2026-02-14_080000_abc123")
	if err != nil || !strings.HasPrefix(k, layout.IdempotencyRunsPrefix("api:c:1")) || storekey.ValidateKey(k) != nil {
		t.Fatalf("IdempotencyRunKey: %q %v", k, err)
	}
	if id, ok := layout.ParseIdempotencyRunKey(k); !ok || id != "run_2026-02-14_080000_abc123" {
		t.Errorf("ParseIdempotencyRunKey(%q) = %q %v", k, id, ok)
	}
	if layout.IsIdempotencyKey(k) {
		t.Errorf("a run marker %q reads as an idempotency record", k)
	}
	for _, bad := range []string{layout.IdempotencyKey("api:c:1"), "idempotency/runs/abc/run_1.json", layout.IdempotencyRunsPrefix("x") + "../x.json"} {
		if _, ok := layout.ParseIdempotencyRunKey(bad); ok {
			t.Errorf("ParseIdempotencyRunKey(%q) accepted", bad)
		}
	}
	if _, err := layout.IdempotencyRunKey("api:c:1", "../x"); err == nil {
		t.Error("IdempotencyRunKey took a hostile run id")
	}
}

// TestPriorityLaneKeys: a lane listed in key order lists its entries by
// priority (higher first), then ready time, then job id; a key in the
// format of the releases before priorities (the fixture's) reads as the
// default priority and sorts among the default's entries by its time.
func TestPriorityLaneKeys(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	type entry struct {
		priority int
		at       time.Duration // after t0
		id       string
	}
	// In the order a claim must meet them.
	want := []entry{
		{9, 5 * time.Second, "j9"},
		{8, 0, "j8a"}, {8, 0, "j8b"}, {8, time.Second, "j8c"},
		{6, 0, "j6"},
		{5, 0, "j5a"}, {5, time.Second, "j5b"},
		{4, 0, "j4"},
		{1, 0, "j1"},
	}
	var keys []string
	for _, e := range want {
		k, err := layout.PriorityLaneKey("agent-a", e.priority, t0.Add(e.at), e.id)
		if err != nil {
			t.Fatalf("PriorityLaneKey(%d) = %v", e.priority, err)
		}
		agent, p, at, id, ok := layout.ParsePriorityLaneKey(k)
		if !ok || agent != "agent-a" || p != e.priority || !at.Equal(t0.Add(e.at)) || id != e.id {
			t.Fatalf("ParsePriorityLaneKey(%q) = %q %d %v %q %v", k, agent, p, at, id, ok)
		}
		keys = append(keys, k)
	}
	// An entry of the previous release at t0 + 500 ms: between j5a and j5b.
	old := "queue/lanes/agent-a/1771927200500000000-old"
	if _, p, at, id, ok := layout.ParsePriorityLaneKey(old); !ok || p != layout.DefaultLanePriority || !at.Equal(t0.Add(500*time.Millisecond)) || id != "old" {
		t.Fatalf("old key reads as %d %v %q %v", p, at, id, ok)
	}
	sorted := append(slices.Clone(keys), old)
	slices.Sort(sorted)
	wantOrder := slices.Insert(slices.Clone(keys), 6, old)
	if !slices.Equal(sorted, wantOrder) {
		t.Fatalf("key order:\n%q\nwant\n%q", sorted, wantOrder)
	}
	if k, _ := layout.PriorityLaneKey("a", 5, t0, "j"); k != "queue/lanes/a/1771927200000000000-j" {
		t.Fatalf("the default priority's key changed: %q", k)
	}
	if k, _ := layout.PriorityLaneKey("a", 7, t0, "j"); k != "queue/lanes/a/!2-1771927200000000000-j" {
		t.Fatalf("priority 7's key: %q", k)
	}
	for _, p := range []int{0, -1, 10} {
		if _, err := layout.PriorityLaneKey("a", p, t0, "j"); !errors.Is(err, storage.ErrInvalidID) {
			t.Errorf("priority %d: %v, want ErrInvalidID", p, err)
		}
	}
	if _, err := layout.PriorityLaneKey("a", 5, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC), "j"); !errors.Is(err, storage.ErrInvalidID) {
		t.Errorf("a ready time past 2262: %v, want ErrInvalidID", err)
	}
	for _, bad := range []string{
		"queue/lanes/a/!5-1771927200000000000-j", // 9-5: the default has no mark
		"queue/lanes/a/_3-1771927200000000000-j", // 9-3 = 6 is above the default
		"queue/lanes/a/!x-1771927200000000000-j",
		"queue/lanes/a/_9-1771927200000000000-j", // priority 0
		"queue/lanes/a/!1-177192720000000000-j",
		"queue/lanes/a/!1-",
	} {
		if _, _, _, _, ok := layout.ParsePriorityLaneKey(bad); ok {
			t.Errorf("ParsePriorityLaneKey(%q) ok", bad)
		}
	}
}

// TestSlotLockAndPauseKeys: slot 0 of a lane is its agent lock; slot k > 0
// a key no agent's lock can be (AgentFromLockKey passes it by, as a
// release before slots does); each parses back; a paused queue's key
// likewise; malformed ones do not parse.
func TestSlotLockAndPauseKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lane string
		k    int
		key  string
	}{
		{"agent-a", 0, "queue/agents/agent-a.json"},
		{"_type.SEND_EMAIL", 0, "queue/agents/_type.SEND_EMAIL.json"},
		{"_type.SEND_EMAIL", 1, "queue/agents/_type.SEND_EMAIL#1.json"},
		{"_queue.mail.SEND", 1023, "queue/agents/_queue.mail.SEND#1023.json"},
	}
	for _, tt := range tests {
		key, err := layout.SlotLockKey(tt.lane, tt.k)
		if err != nil || key != tt.key {
			t.Errorf("SlotLockKey(%q, %d) = %q, %v, want %q", tt.lane, tt.k, key, err, tt.key)
		}
		if lane, k, ok := layout.ParseSlotLockKey(key); !ok || lane != tt.lane || k != tt.k {
			t.Errorf("ParseSlotLockKey(%q) = %q %d %v", key, lane, k, ok)
		}
		if _, ok := layout.AgentFromLockKey(key); ok != (tt.k == 0) {
			t.Errorf("AgentFromLockKey(%q) ok %v, want %v", key, ok, tt.k == 0)
		}
	}
	for _, bad := range []string{"queue/agents/a#0.json", "queue/agents/a#01.json", "queue/agents/a#-1.json", "queue/agents/a#x.json",
		"queue/agents/#1.json", "queue/agents/a#1", "queue/lanes/a#1.json"} {
		if lane, k, ok := layout.ParseSlotLockKey(bad); ok {
			t.Errorf("ParseSlotLockKey(%q) = %q %d, want not ok", bad, lane, k)
		}
	}
	if _, err := layout.SlotLockKey("a", -1); err == nil {
		t.Error("SlotLockKey of a negative slot")
	}
	if _, err := layout.SlotLockKey("../a", 1); !errors.Is(err, storage.ErrInvalidID) {
		t.Errorf("SlotLockKey of a bad lane: %v", err)
	}
	key, err := layout.PausedQueueKey("mail")
	if err != nil || key != "queue/paused/mail.json" {
		t.Fatalf("PausedQueueKey = %q, %v", key, err)
	}
	if q, ok := layout.QueueFromPausedKey(key); !ok || q != "mail" {
		t.Errorf("QueueFromPausedKey(%q) = %q %v", key, q, ok)
	}
	for _, bad := range []string{"queue/paused/mail", "queue/paused/../x.json", "queue/agents/mail.json"} {
		if _, ok := layout.QueueFromPausedKey(bad); ok {
			t.Errorf("QueueFromPausedKey(%q) ok", bad)
		}
	}
}

func TestIdempotencyExpiryKey(t *testing.T) {
	t.Parallel()
	rec := layout.IdempotencyKey("api:c:1")
	at := time.Date(2026, 11, 28, 21, 37, 5, 0, time.UTC)
	k, ok := layout.IdempotencyExpiryKey(rec, at)
	if !ok || !strings.HasPrefix(k, layout.IdempotencyExpiryHourPrefix(at)) || storekey.ValidateKey(k) != nil {
		t.Fatalf("IdempotencyExpiryKey = %q, %v", k, ok)
	}
	hour, back, ok := layout.ParseIdempotencyExpiryKey(k)
	if !ok || back != rec || !hour.Equal(at.Truncate(time.Hour)) {
		t.Fatalf("ParseIdempotencyExpiryKey(%q) = %v, %q, %v", k, hour, back, ok)
	}
	if _, ok := layout.IdempotencyExpiryKey("idempotency/runs/x.json", at); ok {
		t.Error("a marker key made an expiry entry")
	}
	for _, bad := range []string{
		layout.IdempotencyExpiryPrefix + "2026112821/zz.json",
		layout.IdempotencyExpiryPrefix + "20261128xx/" + strings.Repeat("a", 64) + ".json",
		layout.IdempotencyExpiryPrefix + "2026112821/" + strings.Repeat("g", 64) + ".json",
		layout.IdempotencyExpiryPrefix + "2026112821",
		"index/runs/x.json",
	} {
		if _, _, ok := layout.ParseIdempotencyExpiryKey(bad); ok {
			t.Errorf("ParseIdempotencyExpiryKey(%q) ok", bad)
		}
	}
}

// ParseProposalPendingEntry reads what ProposalPendingKey writes and
// refuses an entry whose time is not NewestFirst's digits.
func TestParseProposalPendingEntry(t *testing.T) {
	t.Parallel()
	key, err := layout.ProposalPendingKey(time.Date(2026, 2, 14, 9, 0, 0, 0, time.UTC), "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := layout.ParseProposalPendingEntry(strings.TrimPrefix(key, layout.ProposalsPendingIndex)); !ok || id != "p-1" {
		t.Errorf("ParseProposalPendingEntry(%q) = %q, %v; want p-1", key, id, ok)
	}
	for _, bad := range []string{"a/b/c/d-p-1", "92233/72/03/6854775807", "92233/72/03/685477580x-p-1", "p-1"} {
		if id, ok := layout.ParseProposalPendingEntry(bad); ok {
			t.Errorf("ParseProposalPendingEntry(%q) = %q, true; want false", bad, id)
		}
	}
}
