package layout

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
)

func validateIDs(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := storekey.ValidateID(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// AgentRunsPrefix is the List prefix of every run of one agent:
// agents/{slug}/runs/.
func AgentRunsPrefix(slug string) (string, error) {
	if err := storekey.ValidateID("slug", slug); err != nil {
		return "", err
	}
	return "agents/" + slug + "/runs/", nil
}

// RunPrefix is the folder of one run (docs/spec.md#key-layout): agents/{slug}/runs/{runId}/.
func RunPrefix(slug, runID string) (string, error) {
	if err := validateIDs("slug", slug, "run id", runID); err != nil {
		return "", err
	}
	return "agents/" + slug + "/runs/" + runID + "/", nil
}

// RunStatusKey is the canonical run status: agents/{slug}/runs/{runId}/status.json.
func RunStatusKey(slug, runID string) (string, error) {
	p, err := RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	return p + "status.json", nil
}

// RunManifestKey is the run metadata: agents/{slug}/runs/{runId}/manifest.json.
func RunManifestKey(slug, runID string) (string, error) {
	p, err := RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	return p + "manifest.json", nil
}

// RunStepsPrefix is the List prefix of a run's steps; listing it yields the
// steps in order because step numbers are zero-padded.
func RunStepsPrefix(slug, runID string) (string, error) {
	p, err := RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	return p + "steps/", nil
}

// RunStepKey is one step result: agents/{slug}/runs/{runId}/steps/NN-name.json,
// e.g. steps/01-context.json. n is 0..99 so that key order is step order.
func RunStepKey(slug, runID string, n int, name string) (string, error) {
	p, err := RunStepsPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	if n < 0 || n > 99 {
		return "", &storekey.IDError{Field: "step number", ID: fmt.Sprint(n), Reason: "outside 0..99"}
	}
	if err := storekey.ValidateID("step name", name); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s%02d-%s.json", p, n, name), nil
}

// RunOutputKey is one output file of a run: agents/{slug}/runs/{runId}/output/{name},
// e.g. output/proposal.json. name is a single validated segment.
func RunOutputKey(slug, runID, name string) (string, error) {
	p, err := RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	if err := storekey.ValidateID("output name", name); err != nil {
		return "", err
	}
	return p + "output/" + name, nil
}

// JobKey is a queued job: jobs/{jobId}.json.
func JobKey(jobID string) (string, error) {
	if err := storekey.ValidateID("job id", jobID); err != nil {
		return "", err
	}
	return "jobs/" + jobID + ".json", nil
}

// ArtifactKey is an artifact record: projects/{cid}/artifacts/{artifactId}.json.
func ArtifactKey(cid, artifactID string) (string, error) {
	if err := validateIDs("project id", cid, "artifact id", artifactID); err != nil {
		return "", err
	}
	return "projects/" + cid + "/artifacts/" + artifactID + ".json", nil
}

// InboxKey is a live inbox entry: inbox/{entryId}.json.
func InboxKey(entryID string) (string, error) {
	if err := storekey.ValidateID("inbox entry id", entryID); err != nil {
		return "", err
	}
	return InboxPrefix + entryID + ".json", nil
}

// The inbox's folders: the live entries, and the expired ones, which move
// under InboxExpiredPrefix (listing InboxPrefix yields both).
const (
	InboxPrefix        = "inbox/"
	InboxExpiredPrefix = InboxPrefix + "expired/"
)

// ParseInboxKey returns the id of a live entry key inbox/{entryId}.json, or
// false for any other key (an expired entry's included).
func ParseInboxKey(key string) (entryID string, ok bool) {
	rest, ok := strings.CutPrefix(key, InboxPrefix)
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	return strings.CutSuffix(rest, ".json")
}

// IsInboxExpiredKey tells whether key is under inbox/expired/.
func IsInboxExpiredKey(key string) bool { return strings.HasPrefix(key, InboxExpiredPrefix) }

// InboxExpiredKey is where an expired entry moves: inbox/expired/{entryId}.json.
// Expired entries move, never vanish (docs/spec.md#inbox-entry-lifecycle).
func InboxExpiredKey(entryID string) (string, error) {
	if err := storekey.ValidateID("inbox entry id", entryID); err != nil {
		return "", err
	}
	return InboxExpiredPrefix + entryID + ".json", nil
}

// AuditPrefix is the List (and Watch) prefix of the whole audit log.
const AuditPrefix = "audit/"

// AuditDayPrefix is the List prefix of one UTC day of audit events:
// audit/YYYYMMDD/.
func AuditDayPrefix(day time.Time) string {
	return AuditPrefix + day.UTC().Format("20060102") + "/"
}

// auditStamp is the fixed-width UTC time every audit event id starts with
// (lifecycle.AuditEventID), so ids sort by time as strings.
const auditStamp = "20060102T150405.000000000Z"

// AuditIDStamp renders t as the lowest audit event id stamped at or after
// t: ids compare with it as strings.
func AuditIDStamp(t time.Time) string { return t.UTC().Format(auditStamp) }

// AuditIDTime returns the time an audit event id starts with, or false
// for a string that does not start with one.
func AuditIDTime(id string) (time.Time, bool) {
	if len(id) < len(auditStamp) {
		return time.Time{}, false
	}
	t, err := time.Parse(auditStamp, id[:len(auditStamp)])
	return t, err == nil
}

// AuditAfter is the ListAfter cursor, within AuditDayPrefix(t), that sorts
// before the key of every event stamped at or after t on t's day and after
// every earlier one: a listing from it starts at time t.
func AuditAfter(t time.Time) string { return AuditDayPrefix(t) + AuditIDStamp(t) }

// AuditKeyOfID is the key of the audit event with id (AuditKey, its day
// read from the time the id starts with), and that time; false for an id
// that is not a valid id starting with an audit time.
func AuditKeyOfID(id string) (key string, ts time.Time, ok bool) {
	ts, ok = AuditIDTime(id)
	if !ok {
		return "", time.Time{}, false
	}
	key, err := AuditKey(ts, id)
	return key, ts, err == nil
}

// AuditKey is one audit event (docs/spec.md#audit-event): audit/YYYYMMDD/{eventId}.json, the
// day taken from ts in UTC.
func AuditKey(ts time.Time, eventID string) (string, error) {
	if err := storekey.ValidateID("audit event id", eventID); err != nil {
		return "", err
	}
	return AuditDayPrefix(ts) + eventID + ".json", nil
}

// ParseAuditKey returns the event id of an audit key
// audit/YYYYMMDD/{eventId}.json, or false for a key of another shape.
func ParseAuditKey(key string) (eventID string, ok bool) {
	rest, ok := strings.CutPrefix(key, AuditPrefix)
	if !ok || len(rest) < 9 || rest[8] != '/' {
		return "", false
	}
	return strings.CutSuffix(rest[9:], ".json")
}

// JobsPrefix is the List prefix of the job records, and of nothing else:
// the queue's own objects (lanes, locks, the sweep lease) live under
// QueuePrefix, so listing jobs/ yields only jobs.
const JobsPrefix = "jobs/"

// JobIDFromKey returns the id of a job key jobs/{jobId}.json, or false for
// any other key.
func JobIDFromKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, JobsPrefix)
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, ".json")
	return id, ok && storekey.ValidateID("job id", id) == nil
}

// The job queue's internal objects, apart from the jobs (issue 10 G).
const (
	// QueuePrefix holds every internal object of the job queue.
	QueuePrefix = "queue/"
	// LanesPrefix is the List prefix of every agent's ready lane.
	LanesPrefix = QueuePrefix + "lanes/"
	// AgentLocksPrefix is the List prefix of the agents' locks.
	AgentLocksPrefix = QueuePrefix + "agents/"
	// SweepLeaseKey holds the queue's sweep lease.
	SweepLeaseKey = QueuePrefix + "sweep/lease.json"
)

// LanePrefix is the List prefix of an agent's ready lane:
// queue/lanes/{agent}/. Its keys (LaneKey) list the job ready first first.
func LanePrefix(agent string) (string, error) {
	if err := storekey.ValidateID("agent slug", agent); err != nil {
		return "", err
	}
	return LanesPrefix + agent + "/", nil
}

// The priorities a lane orders by: 1 to 9, a higher one first; the
// default, 5, is every entry's written before priorities (lifecycle's
// MinPriority, MaxPriority and DefaultPriority say the same to users).
const (
	MinLanePriority     = 1
	MaxLanePriority     = 9
	DefaultLanePriority = 5
)

// LaneKey is a job's entry of the default priority in its agent's ready
// lane: PriorityLaneKey(agent, DefaultLanePriority, at, jobID).
func LaneKey(agent string, at time.Time, jobID string) (string, error) {
	return PriorityLaneKey(agent, DefaultLanePriority, at, jobID)
}

// maxLaneTime is the latest ready time a lane key can hold: 19 digits of
// Unix nanoseconds (an int64) reach April 2262.
var maxLaneTime = time.Unix(0, math.MaxInt64)

// PriorityLaneKey is a job's entry in its agent's ready lane, named so
// that a lane listed in key order lists its entries by priority (higher
// first), then ready time, then job id:
//
//	priority 5 (the default):  queue/lanes/{agent}/{ready}-{jobId}
//	priority 6 to 9:           queue/lanes/{agent}/!{9-priority}-{ready}-{jobId}
//	priority 1 to 4:           queue/lanes/{agent}/_{9-priority}-{ready}-{jobId}
//
// where {ready} is the ready time as 19-digit Unix nanoseconds. The
// default priority's key is the one every release before priorities
// wrote, so their entries sort, parse and are claimed as priority 5: '!'
// sorts before every digit and '_' after, and the rank digit orders the
// priorities within each. at must be in 1970 to 2262.
func PriorityLaneKey(agent string, priority int, at time.Time, jobID string) (string, error) {
	if err := validateIDs("agent slug", agent, "job id", jobID); err != nil {
		return "", err
	}
	if at.Before(time.Unix(0, 0)) || at.After(maxLaneTime) {
		return "", &storekey.IDError{Field: "ready time", ID: at.String(), Reason: "outside 1970 to 2262"}
	}
	switch {
	case priority == DefaultLanePriority:
		return fmt.Sprintf("%s%s/%019d-%s", LanesPrefix, agent, at.UnixNano(), jobID), nil
	case priority > DefaultLanePriority && priority <= MaxLanePriority:
		return fmt.Sprintf("%s%s/!%d-%019d-%s", LanesPrefix, agent, MaxLanePriority-priority, at.UnixNano(), jobID), nil
	case priority >= MinLanePriority && priority < DefaultLanePriority:
		return fmt.Sprintf("%s%s/_%d-%019d-%s", LanesPrefix, agent, MaxLanePriority-priority, at.UnixNano(), jobID), nil
	}
	return "", &storekey.IDError{Field: "priority", ID: strconv.Itoa(priority), Reason: "outside 1 to 9"}
}

// LaneAgent returns the agent of a key under the lanes, queue/lanes/{agent}/…,
// whatever follows; ParseLaneKey reads and checks a whole LaneKey.
func LaneAgent(key string) (agent string, ok bool) {
	rest, ok := strings.CutPrefix(key, LanesPrefix)
	if !ok {
		return "", false
	}
	agent, _, ok = strings.Cut(rest, "/")
	return agent, ok
}

// ParseLaneKey returns the agent, ready time and job id of a lane key of
// any priority (PriorityLaneKey).
func ParseLaneKey(key string) (agent string, at time.Time, jobID string, ok bool) {
	agent, _, at, jobID, ok = ParsePriorityLaneKey(key)
	return agent, at, jobID, ok
}

// ParsePriorityLaneKey returns the agent, priority, ready time and job id
// of a PriorityLaneKey; a key in the format of the releases before
// priorities reads as the default priority.
func ParsePriorityLaneKey(key string) (agent string, priority int, at time.Time, jobID string, ok bool) {
	rest, found := strings.CutPrefix(key, LanesPrefix)
	if !found {
		return "", 0, time.Time{}, "", false
	}
	agent, entry, found := strings.Cut(rest, "/")
	if !found || storekey.ValidateID("agent slug", agent) != nil {
		return "", 0, time.Time{}, "", false
	}
	priority = DefaultLanePriority
	if len(entry) > 3 && (entry[0] == '!' || entry[0] == '_') && entry[2] == '-' {
		rank := int(entry[1]) - '0'
		priority = MaxLanePriority - rank
		if entry[0] == '!' && (priority <= DefaultLanePriority || priority > MaxLanePriority) ||
			entry[0] == '_' && (priority >= DefaultLanePriority || priority < MinLanePriority) {
			return "", 0, time.Time{}, "", false
		}
		entry = entry[3:]
	}
	if len(entry) < 21 || entry[19] != '-' {
		return "", 0, time.Time{}, "", false
	}
	n, err := strconv.ParseInt(entry[:19], 10, 64)
	if err != nil || n < 0 {
		return "", 0, time.Time{}, "", false
	}
	jobID = entry[20:]
	if storekey.ValidateID("job id", jobID) != nil {
		return "", 0, time.Time{}, "", false
	}
	return agent, priority, time.Unix(0, n), jobID, true
}

// AgentLockKey is an agent's lock (one running job per agent):
// queue/agents/{agent}.json.
func AgentLockKey(agent string) (string, error) {
	if err := storekey.ValidateID("agent slug", agent); err != nil {
		return "", err
	}
	return AgentLocksPrefix + agent + ".json", nil
}

// AgentFromLockKey returns the agent of an AgentLockKey.
func AgentFromLockKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, AgentLocksPrefix)
	if !ok {
		return "", false
	}
	agent, ok := strings.CutSuffix(rest, ".json")
	return agent, ok && storekey.ValidateID("agent slug", agent) == nil
}

// The NLM backend's records (docs/spec.md#nlm-request-and-callback) and the index of its jobs in
// flight, so no pass reads finished history and listing NLMJobsPrefix yields
// only jobs.
const (
	NLMJobsPrefix   = "nlm/jobs/"
	NLMActivePrefix = "nlm/active/"
)

// NLMJobKey is an NLM job's record: nlm/jobs/{job_id}.json.
func NLMJobKey(jobID string) (string, error) {
	if err := storekey.ValidateID("job id", jobID); err != nil {
		return "", err
	}
	return NLMJobsPrefix + jobID + ".json", nil
}

// ParseNLMJobKey returns the id of an NLM job key nlm/jobs/{job_id}.json, or
// false for any other key.
func ParseNLMJobKey(key string) (jobID string, ok bool) {
	rest, ok := strings.CutPrefix(key, NLMJobsPrefix)
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, ".json")
}

// NLMActiveKey is an NLM job's entry in the index of jobs in flight:
// nlm/active/{job_id}.
func NLMActiveKey(jobID string) (string, error) {
	if err := storekey.ValidateID("job id", jobID); err != nil {
		return "", err
	}
	return NLMActivePrefix + jobID, nil
}

// The Runner's own objects beside the run folders (docs/spec.md#key-layout): an index
// from run id to agent, the runs not yet terminal (so recovery and polling
// cost O(active runs)), and the idempotency records.
const (
	RunIndexPrefix    = "index/runs/"
	RunActivePrefix   = "index/active/"
	IdempotencyPrefix = "idempotency/"
)

// RunIndexKey maps a run id to its agent: index/runs/{runId}.json.
func RunIndexKey(runID string) (string, error) {
	if err := storekey.ValidateID("run id", runID); err != nil {
		return "", err
	}
	return RunIndexPrefix + runID + ".json", nil
}

// RunActiveKey lists a run not yet terminal: index/active/{slug}/{runId}.
func RunActiveKey(slug, runID string) (string, error) {
	if err := validateIDs("agent slug", slug, "run id", runID); err != nil {
		return "", err
	}
	return RunActivePrefix + slug + "/" + runID, nil
}

// ParseRunActiveKey splits a RunActiveKey.
func ParseRunActiveKey(key string) (slug, runID string, ok bool) {
	rest, found := strings.CutPrefix(key, RunActivePrefix)
	if !found {
		return "", "", false
	}
	slug, runID, found = strings.Cut(rest, "/")
	if !found || storekey.ValidateID("agent slug", slug) != nil || storekey.ValidateID("run id", runID) != nil {
		return "", "", false
	}
	return slug, runID, true
}

// RunSlotKey is one of an agent's concurrency slots:
// agents/{slug}/slots/{n}.json.
func RunSlotKey(slug string, n int) (string, error) {
	if err := storekey.ValidateID("agent slug", slug); err != nil {
		return "", err
	}
	if n < 0 {
		return "", &storekey.IDError{Field: "slot", ID: strconv.Itoa(n), Reason: "negative"}
	}
	return "agents/" + slug + "/slots/" + strconv.Itoa(n) + ".json", nil
}

// IsRunSlotKey tells whether key is an agent's concurrency slot,
// agents/{slug}/slots/{n}.json.
func IsRunSlotKey(key string) bool {
	slug, rest, ok := cutAgent(key)
	return ok && slug != "" && strings.HasPrefix(rest, "slots/") && strings.HasSuffix(rest, ".json")
}

// ParseRunStatusKey returns the agent and run of a status key
// agents/{slug}/runs/{runId}/status.json, or false for any other key. It
// checks the shape only: the ids are what the key holds.
func ParseRunStatusKey(key string) (slug, runID string, ok bool) {
	slug, rest, ok := cutAgent(key)
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutPrefix(rest, "runs/")
	if !ok {
		return "", "", false
	}
	runID, ok = strings.CutSuffix(rest, "/status.json")
	if !ok || strings.Contains(runID, "/") {
		return "", "", false
	}
	return slug, runID, true
}

// cutAgent splits agents/{slug}/{rest}.
func cutAgent(key string) (slug, rest string, ok bool) {
	rest, ok = strings.CutPrefix(key, "agents/")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// RunInputKey keeps a run's input, so any runner can resume it:
// agents/{slug}/runs/{runId}/input.json.
func RunInputKey(slug, runID string) (string, error) {
	p, err := RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	return p + "input.json", nil
}

// RunWaitKey keeps the JSON payload of an approval decision or an external
// event a run received, named by the payload's sha256 (64 lower-case hex
// digits): agents/{slug}/runs/{runId}/waits/{sha256}.json. Named by its
// content, two deciders racing never overwrite each other's payload; the
// status names the one whose write won.
func RunWaitKey(slug, runID, sha string) (string, error) {
	p, err := RunPrefix(slug, runID)
	if err != nil {
		return "", err
	}
	if len(sha) != 64 || strings.Trim(sha, "0123456789abcdef") != "" {
		return "", &storekey.IDError{Field: "payload sha256", ID: sha, Reason: "not 64 lower-case hex digits"}
	}
	return p + "waits/" + sha + ".json", nil
}

// IdempotencyKey is an idempotency record: idempotency/{sha256 of the
// client's key}.json. The key is hashed, so any string a client sends makes
// a valid key of fixed length.
func IdempotencyKey(clientKey string) string {
	sum := sha256.Sum256([]byte(clientKey))
	return IdempotencyPrefix + hex.EncodeToString(sum[:]) + ".json"
}

// IdempotencyRunsPrefix is the List prefix of the run markers of one
// client key: idempotency/runs/{sha256 of the key}/. A marker is written
// once per run a key's record names, on a store that settles (see
// IdempotencyRunKey).
func IdempotencyRunsPrefix(clientKey string) string {
	sum := sha256.Sum256([]byte(clientKey))
	return IdempotencyPrefix + "runs/" + hex.EncodeToString(sum[:]) + "/"
}

// IdempotencyRunKey is the marker of one run of a client key:
// idempotency/runs/{sha256 of the key}/{runId}.json. Distinct runs have
// distinct keys, so no create-only write of one can land over another's.
func IdempotencyRunKey(clientKey, runID string) (string, error) {
	if err := storekey.ValidateID("run id", runID); err != nil {
		return "", err
	}
	return IdempotencyRunsPrefix(clientKey) + runID + ".json", nil
}

// ParseIdempotencyRunKey returns the run id of a run marker key
// (IdempotencyRunKey), or false for any other key.
func ParseIdempotencyRunKey(key string) (runID string, ok bool) {
	rest, ok := strings.CutPrefix(key, IdempotencyPrefix+"runs/")
	if !ok {
		return "", false
	}
	sum, file, ok := strings.Cut(rest, "/")
	if !ok || len(sum) != 2*sha256.Size {
		return "", false
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return "", false
	}
	runID, ok = strings.CutSuffix(file, ".json")
	return runID, ok && storekey.ValidateID("run id", runID) == nil
}

// ArtifactsPrefix is the List prefix of a project's artifacts:
// projects/{cid}/artifacts/.
func ArtifactsPrefix(cid string) (string, error) {
	if err := storekey.ValidateID("project id", cid); err != nil {
		return "", err
	}
	return "projects/" + cid + "/artifacts/", nil
}

// SchedulesPrefix holds the state of each schedule (issue 13): its last
// slot fired and whether it is paused.
const SchedulesPrefix = "schedules/"

// ScheduleKey is a schedule's state: schedules/{schedule_id}.json.
func ScheduleKey(scheduleID string) (string, error) {
	if err := storekey.ValidateID("schedule id", scheduleID); err != nil {
		return "", err
	}
	return SchedulesPrefix + scheduleID + ".json", nil
}

// The webhook intake's own records (issue 13), beside the Runner's
// idempotency records: the secondary dedupe windows of docs/spec.md#idempotency and the
// deliveries such a window absorbed.
const (
	WebhooksPrefix         = "webhooks/"
	GitHubWindowsPrefix    = WebhooksPrefix + "github/windows/"
	GitHubDeliveriesPrefix = WebhooksPrefix + "github/deliveries/"
)

// GitHubWindowKey is the secondary dedupe window of one subject of GitHub
// events (a repository, a PR or issue number and an event type):
// webhooks/github/windows/{sha256 of the three}.json. Hashed because a
// repository's full name holds a "/" and an event type is free text; the
// parts are joined with NUL, which none of them can hold, so two subjects
// never share a key.
func GitHubWindowKey(repository string, number int64, eventType string) string {
	sum := sha256.Sum256([]byte(repository + "\x00" + strconv.FormatInt(number, 10) + "\x00" + eventType))
	return GitHubWindowsPrefix + hex.EncodeToString(sum[:]) + ".json"
}

// GitHubDeliveryKey is the record of a GitHub delivery that a secondary
// dedupe window absorbed as a duplicate of another:
// webhooks/github/deliveries/{delivery}.json.
func GitHubDeliveryKey(delivery string) (string, error) {
	if err := storekey.ValidateID("delivery id", delivery); err != nil {
		return "", err
	}
	return GitHubDeliveriesPrefix + delivery + ".json", nil
}

// The history indexes (issue 20): keys kept by a record's one writer so a
// filtered list is read newest first from a cursor, at a cost that does
// not grow with history. A newest-first key holds the record's creation
// time inverted (NewestFirst), so the store's ascending listing yields the
// newest record first. The entries are empty objects: the key is the
// entry, and a reader reads the record it names and skips it when the
// record no longer matches (a status moved since).
const (
	// RunHistoryPrefix lists every run of an agent, newest first:
	// index/run-history/{slug}/{inverted started_at}-{runId}. Written once,
	// when the run is created.
	RunHistoryPrefix = "index/run-history/"
	// RunStatusIndexPrefix lists the runs of an agent in one status, newest
	// first: index/run-status/{slug}/{status}/{inverted started_at}-{runId}.
	// Moved by the status writer when the status changes.
	RunStatusIndexPrefix = "index/run-status/"
	// RunBackfillPrefix holds one marker per agent whose runs written
	// before the history indexes existed have been indexed:
	// index/run-backfill/{slug}.json.
	RunBackfillPrefix = "index/run-backfill/"
)

// NewestFirst is the entry name of a record created at at with id in a
// newest-first index: the 19 digits of MaxInt64 less at in Unix
// nanoseconds, cut into folders, then the id:
// {5 digits}/{2 digits}/{2 digits}/{10 digits}-{id}. The cut keeps every
// folder of a directory store small however long the history, since such a
// store reads a whole folder to list from it: the first level gains a
// folder every 27.8 hours, the second holds at most 100 folders of 16.7
// minutes, the third at most 100 of 10 seconds, the last the records of
// ten seconds. at must not be before 1970.
func NewestFirst(at time.Time, id string) (string, error) {
	n := at.UnixNano()
	if n < 0 {
		return "", &storekey.IDError{Field: "creation time", ID: at.String(), Reason: "before 1970"}
	}
	d := fmt.Sprintf("%019d", math.MaxInt64-n)
	return d[:5] + "/" + d[5:7] + "/" + d[7:9] + "/" + d[9:] + "-" + id, nil
}

// newestFirstLen is the length of a NewestFirst entry up to its id.
const newestFirstLen = 5 + 1 + 2 + 1 + 2 + 1 + 10 + 1

// ParseNewestFirst splits a NewestFirst entry name.
func ParseNewestFirst(entry string) (at time.Time, id string, ok bool) {
	if len(entry) <= newestFirstLen || entry[5] != '/' || entry[8] != '/' || entry[11] != '/' || entry[22] != '-' {
		return time.Time{}, "", false
	}
	n, err := strconv.ParseInt(entry[:5]+entry[6:8]+entry[9:11]+entry[12:22], 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, "", false
	}
	id = entry[newestFirstLen:]
	if storekey.ValidateID("id", id) != nil {
		return time.Time{}, "", false
	}
	return time.Unix(0, math.MaxInt64-n).UTC(), id, true
}

// EncodeCursor makes the opaque cursor of a page that ends at entry (a
// key less its index's prefix): its bytes in unpadded base64url, so it
// travels in a query string as is.
func EncodeCursor(entry string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(entry))
}

// DecodeCursor returns the entry of a cursor EncodeCursor made, or false
// for a string it cannot have made.
func DecodeCursor(cursor string) (entry string, ok bool) {
	if cursor == "" || len(cursor) > 1024 {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) == 0 || storekey.ValidatePrefix(string(b)) != nil {
		return "", false
	}
	return string(b), true
}

// RunHistoryAgentPrefix is the List prefix of an agent's run history:
// index/run-history/{slug}/.
func RunHistoryAgentPrefix(slug string) (string, error) {
	if err := storekey.ValidateID("agent slug", slug); err != nil {
		return "", err
	}
	return RunHistoryPrefix + slug + "/", nil
}

// RunHistoryKey is a run's entry in its agent's history:
// index/run-history/{slug}/{NewestFirst(started_at, runId)}.
func RunHistoryKey(slug string, startedAt time.Time, runID string) (string, error) {
	p, err := RunHistoryAgentPrefix(slug)
	if err != nil {
		return "", err
	}
	return newestFirstKey(p, "run id", startedAt, runID)
}

// RunStatusIndexAgentPrefix is the List prefix of an agent's runs in one
// status: index/run-status/{slug}/{status}/.
func RunStatusIndexAgentPrefix(slug, status string) (string, error) {
	if err := validateIDs("agent slug", slug, "status", status); err != nil {
		return "", err
	}
	return RunStatusIndexPrefix + slug + "/" + status + "/", nil
}

// RunStatusIndexKey is a run's entry among its agent's runs in status:
// index/run-status/{slug}/{status}/{NewestFirst(started_at, runId)}.
func RunStatusIndexKey(slug, status string, startedAt time.Time, runID string) (string, error) {
	p, err := RunStatusIndexAgentPrefix(slug, status)
	if err != nil {
		return "", err
	}
	return newestFirstKey(p, "run id", startedAt, runID)
}

// RunBackfillKey is the marker of an agent whose older runs are indexed:
// index/run-backfill/{slug}.json.
func RunBackfillKey(slug string) (string, error) {
	if err := storekey.ValidateID("agent slug", slug); err != nil {
		return "", err
	}
	return RunBackfillPrefix + slug + ".json", nil
}

// RunIndexKeys are every index key a run may have while its status is
// status: its id-to-agent entry, its active entry, its history entry and
// its status entry. Whoever deletes a finished run (retention) deletes
// these with it; an entry of a status the run left is its writer's to
// delete, and a reader skips one that lingers.
func RunIndexKeys(slug, runID, status string, startedAt time.Time) ([]string, error) {
	id, err := RunIndexKey(runID)
	if err != nil {
		return nil, err
	}
	active, err := RunActiveKey(slug, runID)
	if err != nil {
		return nil, err
	}
	hist, err := RunHistoryKey(slug, startedAt, runID)
	if err != nil {
		return nil, err
	}
	st, err := RunStatusIndexKey(slug, status, startedAt, runID)
	if err != nil {
		return nil, err
	}
	return []string{id, active, hist, st}, nil
}

// newestFirstKey is prefix + NewestFirst(at, id), id checked as field.
func newestFirstKey(prefix, field string, at time.Time, id string) (string, error) {
	if err := storekey.ValidateID(field, id); err != nil {
		return "", err
	}
	e, err := NewestFirst(at, id)
	if err != nil {
		return "", err
	}
	return prefix + e, nil
}

// The prefixes the retention janitor pages through, beside the ones above:
// every run folder and every project's artifacts (and AuditPrefix).
const (
	AgentsPrefix   = "agents/"
	ProjectsPrefix = "projects/"
)

// CursorKeyKey holds the key that signs the HTTP API's page cursors, one
// for every Worker on the store: system/cursor-key.json.
const CursorKeyKey = "system/cursor-key.json"

// JanitorKey holds the retention janitor's lease and its cursor through
// the current pass: retention/janitor.json.
const JanitorKey = "retention/janitor.json"

// ParseAuditDay returns the UTC day of a key under an audit day folder,
// audit/YYYYMMDD/..., or false for a key of another shape.
func ParseAuditDay(key string) (day time.Time, ok bool) {
	rest, ok := strings.CutPrefix(key, AuditPrefix)
	if !ok || len(rest) < 9 || rest[8] != '/' {
		return time.Time{}, false
	}
	d, err := time.Parse("20060102", rest[:8])
	if err != nil {
		return time.Time{}, false
	}
	return d.UTC(), true
}

// ParseInboxExpiredKey returns the id of an expired entry's key
// inbox/expired/{entryId}.json, or false for any other key.
func ParseInboxExpiredKey(key string) (entryID string, ok bool) {
	rest, ok := strings.CutPrefix(key, InboxExpiredPrefix)
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	entryID, ok = strings.CutSuffix(rest, ".json")
	return entryID, ok && storekey.ValidateID("inbox entry id", entryID) == nil
}

// IsIdempotencyKey tells whether key is an idempotency record,
// idempotency/{64 hex digits}.json (IdempotencyKey).
func IsIdempotencyKey(key string) bool {
	rest, ok := strings.CutPrefix(key, IdempotencyPrefix)
	if !ok {
		return false
	}
	sum, ok := strings.CutSuffix(rest, ".json")
	if !ok || len(sum) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(sum)
	return err == nil
}

// ParseArtifactKey returns the project and artifact of an artifact key
// projects/{cid}/artifacts/{artifactId}.json, or false for any other key.
func ParseArtifactKey(key string) (cid, artifactID string, ok bool) {
	rest, ok := strings.CutPrefix(key, ProjectsPrefix)
	if !ok {
		return "", "", false
	}
	cid, rest, ok = strings.Cut(rest, "/artifacts/")
	if !ok || strings.Contains(rest, "/") {
		return "", "", false
	}
	artifactID, ok = strings.CutSuffix(rest, ".json")
	if !ok || validateIDs("project id", cid, "artifact id", artifactID) != nil {
		return "", "", false
	}
	return cid, artifactID, true
}

// ProbePrefix holds the start-up semantics probe's keys (package
// internal/probe): probe/{start}/..., one folder per start, removed when
// the probe ends; a folder a killed start left is removed by a later one.
const ProbePrefix = "probe/"
