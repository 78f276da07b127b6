package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// The rollups of the audit log's job objects (docs/design.md, "Counts and
// activity"): one immutable record per closed UTC hour, what its objects
// moved (net counts per job type, agent and state) and did minute by
// minute; one per closed UTC day, the net counts of every hour up to its
// end. Written create-only by the first reader after the hour or day
// closed, so every reader after reads one record where it would have read
// the hour's objects.
const (
	statsPrefix     = "stats/jobs/"
	statsHourPrefix = statsPrefix + "hours/"
	statsDayPrefix  = statsPrefix + "days/"
	// statsHourFormat and statsDayFormat name the records: they sort by time.
	statsHourFormat = "20060102T15"
	statsDayFormat  = "20060102"
)

// tallyGrace is how long after its end an hour (a day) is closed: an
// audit object is keyed by the time of its job's rest and written then,
// or by the next writer or sweep that finds it missing (a writer died
// between its write and its flush); past the grace the rollup is made,
// and an object landing later is not in it.
const tallyGrace = 15 * time.Minute

// tallyReads bounds the store reads (audit objects, job records, locks)
// one Counts or Activity call makes: past it the call answers partial,
// what it rolled up is kept, and the next call goes on.
const tallyReads = 20000

// tallySeen bounds the audit objects of the open hours a Queue keeps what
// it read of (about 100 bytes each).
const tallySeen = 200000

// tallyNames bounds the job names (job id → type, agent, machine) a
// Queue keeps for the audit objects it reads again.
const tallyNames = 100000

// latencyBounds are the upper bounds in ms of the run-time and wait
// histograms' buckets; a last bucket holds the rest.
var latencyBounds = []int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 120000, 300000, 600000}

// segment is what one audit object of a job says for the counts and the
// charts: the rest the job left (its first move's from, "" at creation),
// the rest it came to, when, and the attempts that ended in it.
type segment struct {
	job      string
	tenant   string // the job's, from its events (docs/design.md#tenants)
	from, to lifecycle.JobState
	at       time.Time
	failed   int   // attempts that failed (moves into RETRY_BACKOFF)
	runMS    int64 // pickup to rest; -1 without a pickup
	waitMS   int64 // in QUEUED to pickup; -1 without both
	isJob    bool
}

// segmentOf reads a job's audit object (records.Expand's events, oldest
// first); not a job's (a run's, an artifact's alone) gives isJob false.
func segmentOf(evs []lifecycle.AuditEvent) segment {
	s := segment{runMS: -1, waitMS: -1}
	var queuedAt, pickedAt time.Time
	for _, ev := range evs {
		if ev.JobID == "" || ev.Event != "job.create" && ev.Event != "job.status.update" {
			continue
		}
		from, to := lifecycle.JobState(ev.From), lifecycle.JobState(ev.To)
		if !s.isJob {
			s.isJob, s.job, s.from = true, ev.JobID, from
		}
		if ev.TenantID != "" {
			s.tenant = ev.TenantID
		}
		s.to, s.at = to, ev.TS
		switch {
		case to == lifecycle.JobQueued:
			queuedAt = ev.TS
		case from == lifecycle.JobQueued && to != lifecycle.JobCancelled:
			pickedAt = ev.TS
		}
		// An attempt fails into RETRY_BACKOFF (whose guards may go on to
		// FAILED in the same write: one failure, not two).
		if to == lifecycle.JobRetryBackoff || to == lifecycle.JobFailed && from != lifecycle.JobRetryBackoff {
			s.failed++
		}
	}
	if !pickedAt.IsZero() {
		s.runMS = s.at.Sub(pickedAt).Milliseconds()
		if !queuedAt.IsZero() && !queuedAt.After(pickedAt) {
			s.waitMS = pickedAt.Sub(queuedAt).Milliseconds()
		}
	}
	return s
}

// jobName is what counts a job under: its tenant, type, agent and
// machine, which never change. The tenant is left out of a rollup for the
// default tenant, so the rollups written before tenants read as its.
type jobName struct {
	Tenant    string            `json:"tenant_id,omitempty"`
	JobType   lifecycle.JobType `json:"job_type"`
	AgentSlug string            `json:"agent_slug"`
	Machine   string            `json:"machine"`
}

// netKey is one count: a job name and a state.
type netKey struct {
	jobName
	state lifecycle.JobState
}

// netRow is a count as a rollup record holds it.
type netRow struct {
	jobName
	State lifecycle.JobState `json:"state"`
	N     int64              `json:"n"`
}

// minuteRow is one minute of an hour's rollup (M: the minute in the
// hour) for one tenant (none: the default, as every row before tenants),
// its histograms by latencyBounds.
type minuteRow struct {
	M         int    `json:"m"`
	Tenant    string `json:"tenant_id,omitempty"`
	Completed int    `json:"completed,omitempty"`
	Failed    int    `json:"failed,omitempty"`
	Cancelled int    `json:"cancelled,omitempty"`
	Run       []int  `json:"run,omitempty"`
	Wait      []int  `json:"wait,omitempty"`
	MaxRunMS  int64  `json:"max_run_ms,omitempty"`
	MaxWaitMS int64  `json:"max_wait_ms,omitempty"`
}

// chunkRecord is stats/jobs/hours/{yyyymmddThh}/{nnnn}.json, one part
// of an hour's rollup: what the hour's job objects after the chunk
// before's Through and up to its own (audit keys) moved (Net: +1 where a
// job came to rest, -1 where it left one) and did, minute by minute
// (minutes without work left out). Last says the hour is done. An hour
// is rolled in chunks so that a busy hour is rolled over several calls,
// each within its reads.
type chunkRecord struct {
	Through string      `json:"through,omitempty"`
	Last    bool        `json:"last,omitempty"`
	Objects int         `json:"objects"`
	Net     []netRow    `json:"net,omitempty"`
	Minutes []minuteRow `json:"minutes,omitempty"`
}

// dayRecord is stats/jobs/days/{yyyymmdd}.json: the net counts of every
// job object up to the day's end (the day before's and the day's hours).
type dayRecord struct {
	Day time.Time `json:"day"`
	Net []netRow  `json:"net,omitempty"`
}

// tally is Operator.Counts and Operator.Activity: it reads the rollups, makes
// the missing ones of closed hours and days, and reads the audit objects
// since the last closed hour itself, keeping what each said (they never
// change) until its hour is rolled up.
type tally struct {
	store *storage.Store
	clock clock.Clock
	jobs  *jobStore
	log   *slog.Logger
	quar  *quarantine // a rollup that does not decode goes there

	mu    sync.Mutex
	seen  map[string]segment  // audit key → its segment, for the open hours
	names map[string]jobName  // job id → its name
	laned map[string]lanedJob // lane key → its job as a count last read it (counts_lanes.go)
}

// budget is one call's reads left (tallyReads); spent says a read was
// refused for want of it, and the call is partial.
type budget struct {
	left  int
	spent bool
}

func (b *budget) take() bool {
	if b.left <= 0 {
		b.spent = true
		return false
	}
	b.left--
	return true
}

// closedHour is the last hour closed at now (tallyGrace after its end).
func closedHour(now time.Time) time.Time {
	return now.UTC().Add(-tallyGrace).Truncate(time.Hour).Add(-time.Hour)
}

// closedDay is the last day closed at now.
func closedDay(now time.Time) time.Time {
	return now.UTC().Add(-tallyGrace).Truncate(24 * time.Hour).Add(-24 * time.Hour)
}

// name is the name of job id: from the cache, else its record (one read
// of the budget); a job whose record is gone counts under its id's
// absence: type "", agent "".
func (t *tally) name(ctx context.Context, id string, b *budget) (jobName, bool, error) {
	t.mu.Lock()
	n, ok := t.names[id]
	t.mu.Unlock()
	if ok {
		return n, true, nil
	}
	if !b.take() {
		return jobName{}, false, nil
	}
	d, _, err := t.jobs.read(ctx, id)
	switch {
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, errNewerRecord):
		// gone (retention), poison (quarantined) or a later release's:
		// counted under no name
	case err != nil:
		return jobName{}, false, err
	default:
		n = nameOf(&d.Job)
	}
	t.remember(id, n)
	return n, true, nil
}

func nameOf(j *lifecycle.Job) jobName {
	return jobName{Tenant: j.TenantID, JobType: j.JobType, AgentSlug: j.AgentSlug, Machine: jobMachineOf(j).Name()}
}

func (t *tally) remember(id string, n jobName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.names == nil || len(t.names) >= tallyNames {
		t.names = map[string]jobName{} // dropped whole: read again when needed
	}
	t.names[id] = n
}

// live yields the job segments of the audit objects stamped from from
// on (the hours not yet rolled up), each object read once and kept until
// its hour is rolled up (forget). ok false: b ran out first.
func (t *tally) live(ctx context.Context, from, now time.Time, b *budget, each func(segment) error) (ok bool, err error) {
	for day := from.Truncate(24 * time.Hour); !day.After(now); day = day.Add(24 * time.Hour) {
		after := ""
		if day.Before(from) {
			after = layout.AuditAfter(from)
		}
		for key, err := range t.store.ListAfter(ctx, layout.AuditDayPrefix(day), after) {
			if err != nil {
				return false, err
			}
			id, isAudit := layout.ParseAuditKey(key)
			if !isAudit {
				continue
			}
			s, seen := t.cachedSegment(key)
			if !seen {
				if !b.take() {
					return false, nil
				}
				evs, err := readAuditObject(ctx, t.store, key, id)
				if err != nil {
					return false, err
				}
				s = segmentOf(evs)
				t.mu.Lock()
				if t.seen == nil {
					t.seen = map[string]segment{}
				}
				if len(t.seen) < tallySeen { // past it, read again each call (within b)
					t.seen[key] = s
				}
				t.mu.Unlock()
			}
			if s.isJob {
				if err := each(s); err != nil {
					return false, err
				}
			}
		}
	}
	return true, nil
}

func (t *tally) cachedSegment(key string) (segment, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.seen[key]
	return s, ok
}

// forget drops the cached segments of the hours before from: rolled up.
func (t *tally) forget(from time.Time) {
	first := layout.AuditDayPrefix(from) + layout.AuditIDStamp(from)
	t.mu.Lock()
	defer t.mu.Unlock()
	for key := range t.seen {
		if key < first {
			delete(t.seen, key)
		}
	}
}

// hourAcc gathers an hour's (or any window's) segments.
type hourAcc struct {
	net     map[netKey]int64
	minutes map[minuteKey]*minuteRow
	objects int
}

// minuteKey is a minute's start and a tenant.
type minuteKey struct {
	at     time.Time
	tenant string
}

func newAcc() *hourAcc {
	return &hourAcc{net: map[netKey]int64{}, minutes: map[minuteKey]*minuteRow{}}
}

// add counts s, of the job named n (the tenant its events say when its
// record, gone, did not).
func (a *hourAcc) add(s segment, n jobName) {
	if n.Tenant == "" {
		n.Tenant = s.tenant
	}
	a.objects++
	a.net[netKey{n, s.to}]++
	if s.from != "" {
		a.net[netKey{n, s.from}]--
	}
	at := minuteKey{s.at.UTC().Truncate(time.Minute), n.Tenant}
	m := a.minutes[at]
	if m == nil {
		m = &minuteRow{M: at.at.Minute(), Tenant: n.Tenant}
		a.minutes[at] = m
	}
	switch s.to {
	case lifecycle.JobComplete:
		m.Completed++
	case lifecycle.JobCancelled:
		m.Cancelled++
	}
	m.Failed += s.failed
	if s.runMS >= 0 {
		m.Run = observe(m.Run, s.runMS)
		m.MaxRunMS = max(m.MaxRunMS, s.runMS)
	}
	if s.waitMS >= 0 {
		m.Wait = observe(m.Wait, s.waitMS)
		m.MaxWaitMS = max(m.MaxWaitMS, s.waitMS)
	}
}

// observe counts ms in its bucket of hist (latencyBounds).
func observe(hist []int, ms int64) []int {
	if hist == nil {
		hist = make([]int, len(latencyBounds)+1)
	}
	i, _ := slices.BinarySearch(latencyBounds, ms)
	hist[i]++
	return hist
}

// addNet adds rows to a.net.
func (a *hourAcc) addNet(rows []netRow) {
	for _, r := range rows {
		a.net[netKey{r.jobName, r.State}] += r.N
	}
}

// rows is a.net as a record holds it: sorted, zeros left out.
func netRows(net map[netKey]int64) []netRow {
	out := make([]netRow, 0, len(net))
	for k, n := range net {
		if n != 0 {
			out = append(out, netRow{jobName: k.jobName, State: k.state, N: n})
		}
	}
	slices.SortFunc(out, func(x, y netRow) int {
		return strings.Compare(fmt.Sprint(x.Tenant, "\x00", x.JobType, "\x00", x.AgentSlug, "\x00", x.Machine, "\x00", x.State),
			fmt.Sprint(y.Tenant, "\x00", y.JobType, "\x00", y.AgentSlug, "\x00", y.Machine, "\x00", y.State))
	})
	return out
}

// chunk is a as a chunk record.
func (a *hourAcc) chunk(through string, last bool) chunkRecord {
	r := chunkRecord{Through: through, Last: last, Objects: a.objects, Net: netRows(a.net)}
	for _, at := range slices.SortedFunc(maps.Keys(a.minutes), func(x, y minuteKey) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return strings.Compare(x.tenant, y.tenant)
	}) {
		r.Minutes = append(r.Minutes, *a.minutes[at])
	}
	return r
}

// merge adds chunk c of hour h to a.
func (a *hourAcc) merge(h time.Time, c *chunkRecord) {
	a.objects += c.Objects
	a.addNet(c.Net)
	for _, m := range c.Minutes {
		at := minuteKey{h.Add(time.Duration(m.M) * time.Minute), m.Tenant}
		into := a.minutes[at]
		if into == nil {
			into = &minuteRow{M: m.M, Tenant: m.Tenant}
			a.minutes[at] = into
		}
		into.addUp(&m)
	}
}

// addUp adds minute m's work to r.
func (r *minuteRow) addUp(m *minuteRow) {
	r.Completed += m.Completed
	r.Failed += m.Failed
	r.Cancelled += m.Cancelled
	r.Run, r.Wait = addHist(r.Run, m.Run), addHist(r.Wait, m.Wait)
	r.MaxRunMS, r.MaxWaitMS = max(r.MaxRunMS, m.MaxRunMS), max(r.MaxWaitMS, m.MaxWaitMS)
}

func addHist(into, h []int) []int {
	if h == nil {
		return into
	}
	if into == nil {
		into = make([]int, len(latencyBounds)+1)
	}
	for i := range min(len(h), len(into)) {
		into[i] += h[i]
	}
	return into
}

// hour reads the rollup of closed hour h into a, making its missing
// chunks (create-only) as far as b goes. ok false: the hour is not done.
func (t *tally) hour(ctx context.Context, h time.Time, a *hourAcc, b *budget) (ok bool, err error) {
	prefix := statsHourPrefix + h.Format(statsHourFormat) + "/"
	after, seq := layout.AuditAfter(h), 0
	var chunks []chunkRecord // merged once all are read: a quarantined one rolls the hour anew
	for key, err := range t.store.List(ctx, prefix) {
		if err != nil {
			return false, err
		}
		if want := fmt.Sprintf("%s%04d.json", prefix, seq); key != want {
			// A chunk listed out of turn (one before it not listed yet,
			// on a store that settles): merging it would roll the hour,
			// and then its day, without that chunk, for good. Unless
			// that one was quarantined: then the hour is rolled anew.
			if _, _, gone := records.FindQuarantined(ctx, t.store, want); gone {
				return t.rollWhole(ctx, h, a, b)
			}
			return false, nil
		}
		var c chunkRecord
		found, err := t.getRecord(ctx, key, &c, b)
		if errors.Is(err, errRollupQuarantined) {
			return t.rollWhole(ctx, h, a, b)
		}
		if !found || err != nil {
			return false, err
		}
		chunks = append(chunks, c)
		if c.Last {
			for i := range chunks {
				a.merge(h, &chunks[i])
			}
			return true, nil
		}
		after, seq = c.Through, seq+1
	}
	for i := range chunks {
		a.merge(h, &chunks[i])
	}
	c := newAcc()
	through, done, err := t.roll(ctx, h, after, c, b)
	if err != nil || through == after && !done {
		return false, err
	}
	rec := c.chunk(through, done)
	key := fmt.Sprintf("%s%04d.json", prefix, seq)
	if _, err := t.store.Put(ctx, key, mustJSON(&rec), storage.IfNotExists()); err != nil {
		if errors.Is(err, storage.ErrPreconditionFailed) {
			return false, nil // another reader rolled it meanwhile: read next time
		}
		return false, err
	}
	a.merge(h, &rec)
	return done, nil
}

// roll reads hour h's job objects after the audit key after into c, as
// far as b goes, each whole (its object and its job's name): through is
// the last key read, done that the hour is.
func (t *tally) roll(ctx context.Context, h time.Time, after string, c *hourAcc, b *budget) (through string, done bool, err error) {
	end := layout.AuditIDStamp(h.Add(time.Hour))
	through = after
	for key, err := range t.store.ListAfter(ctx, layout.AuditDayPrefix(h), after) {
		if err != nil {
			return through, false, err
		}
		id, isAudit := layout.ParseAuditKey(key)
		if !isAudit {
			continue
		}
		if len(id) >= len(end) && id[:len(end)] >= end {
			break
		}
		if b.left < 2 { // its object and its job's name
			b.spent = true
			return through, false, nil
		}
		b.take()
		evs, err := readAuditObject(ctx, t.store, key, id)
		if err != nil {
			return through, false, err
		}
		if s := segmentOf(evs); s.isJob {
			n, _, err := t.name(ctx, s.job, b)
			if err != nil {
				return through, false, err
			}
			c.add(s, n)
		}
		through = key
	}
	return through, true, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and numbers
	}
	return b
}

// errBudget stops a listing when the budget ran out mid-way.
var errBudget = errors.New("jobqueue: read budget spent")

// getRecord reads the rollup at key into v; found false when it is not
// there (or the budget is spent: b says so).
func (t *tally) getRecord(ctx context.Context, key string, v any, b *budget) (bool, error) {
	if !b.take() {
		return false, nil
	}
	raw, ver, err := t.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, errOr(t.poisonRollup(ctx, key, raw, ver, err), errRollupQuarantined)
	}
	return true, nil
}

// errRollupQuarantined is getRecord's answer for a rollup it found junk
// and quarantined: the caller makes it again from the audit log.
var errRollupQuarantined = errors.New("jobqueue: rollup quarantined")

// rollWhole reads hour h from its audit objects into a, writing nothing:
// the hour whose chunk was quarantined (its span is lost with it, and the
// chunks after it cannot be written again). ok false: b ran out first.
func (t *tally) rollWhole(ctx context.Context, h time.Time, a *hourAcc, b *budget) (bool, error) {
	c := newAcc()
	through, done, err := t.roll(ctx, h, layout.AuditAfter(h), c, b)
	if err != nil || !done {
		return false, err
	}
	rec := c.chunk(through, true)
	a.merge(h, &rec)
	return true, nil
}

// putRecord writes the rollup at key create-only: another reader's
// record of the same closed hour or day holds the same counts.
func (t *tally) putRecord(ctx context.Context, key string, v any) error {
	_, err := t.store.Put(ctx, key, mustJSON(v), storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return nil
	}
	return err
}

// day reads the net counts up to the end of closed day d: its record, or
// one made from the latest day record before it and the hours after
// (each made when missing, oldest first). ok false: the budget ran out
// first; what was made is kept.
func (t *tally) day(ctx context.Context, d time.Time, b *budget) ([]netRow, bool, error) {
	var r dayRecord
	found, err := t.getRecord(ctx, statsDayPrefix+d.Format(statsDayFormat)+".json", &r, b)
	if errors.Is(err, errRollupQuarantined) {
		found, err = false, nil // made again below
	}
	if found || err != nil || b.spent {
		return r.Net, found, err
	}
	base, start, err := t.latestDay(ctx, d)
	if err != nil || start.IsZero() {
		return base, err == nil, err // no audit object before d: nothing to count
	}
	for day := start; !day.After(d); day = day.Add(24 * time.Hour) {
		a := newAcc()
		a.addNet(base)
		for h := day; h.Before(day.Add(24 * time.Hour)); h = h.Add(time.Hour) {
			if ok, err := t.hour(ctx, h, a, b); err != nil || !ok {
				return nil, false, err
			}
		}
		base = netRows(a.net)
		rec := dayRecord{Day: day, Net: base}
		if err := t.putRecord(ctx, statsDayPrefix+day.Format(statsDayFormat)+".json", &rec); err != nil {
			return nil, false, err
		}
	}
	return base, true, nil
}

// latestDay finds where the days before d stand: the net counts of the
// latest day record before d and the day after it, or, with none, the
// day of the log's first object (zero when the log has none before d).
func (t *tally) latestDay(ctx context.Context, d time.Time) ([]netRow, time.Time, error) {
	var before []string
	for key, err := range t.store.List(ctx, statsDayPrefix) {
		if err != nil {
			return nil, time.Time{}, err
		}
		if key < statsDayPrefix+d.Format(statsDayFormat) {
			before = append(before, key)
		}
	}
	for _, last := range slices.Backward(before) {
		var r dayRecord
		raw, ver, err := t.store.Get(ctx, last)
		if errors.Is(err, storage.ErrNotFound) {
			continue // retention took it meanwhile
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			if err := t.poisonRollup(ctx, last, raw, ver, err); err != nil {
				return nil, time.Time{}, err
			}
			continue // quarantined: the day before it is the base
		}
		return r.Net, r.Day.Add(24 * time.Hour), nil
	}
	for key, err := range t.store.List(ctx, layout.AuditPrefix) {
		if err != nil {
			return nil, time.Time{}, err
		}
		first, ok := layout.ParseAuditDay(key)
		if !ok || first.After(d) {
			break
		}
		return nil, first.UTC().Truncate(24 * time.Hour), nil
	}
	return nil, time.Time{}, nil
}

// poisonRollup quarantines the rollup at key, which does not decode, so
// that counts and activity answer from the rest instead of failing on it
// at every call: the call that meets it answers what it can (partial
// where the rollup was needed), and the next reader makes the record
// again from the audit log, create-only, where it still can. An error is
// the store's, the record left where it is.
func (t *tally) poisonRollup(ctx context.Context, key string, raw []byte, ver storage.Version, cause error) error {
	ce := &lifecycle.QuarantinedError{Key: key, Version: string(ver), Data: raw, Reason: "cannot decode", Err: cause}
	if err := t.quar.poison(ctx, ce); !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	t.log.Warn("job rollup quarantined", "key", key, "err", cause)
	return nil
}
