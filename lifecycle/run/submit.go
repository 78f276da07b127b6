package run

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
	"go.opentelemetry.io/otel/trace"
)

// A submit, from its checks to its run written: submission checks it;
// a request with an idempotency key goes through the idempotency flow,
// which claims the key's record (docs/spec.md#idempotency) and, on a store
// that settles, writes the run's marker for the dedupe gate; the creator
// writes the run and hands it to the loop.

// submission checks a submit and hands it to the creator, or to the
// idempotency flow when it carries a key.
type submission struct {
	now     func() time.Time
	tracer  tracing.Tracer
	cat     *catalog
	creator *creator
	idem    *idempotency
}

// submit: see Runner.Submit.
func (s *submission) submit(ctx context.Context, req lifecycle.SubmitRequest) (res lifecycle.SubmitResult, err error) {
	ctx, span := s.tracer.Start(ctx, tracing.SpanSubmit, trace.SpanKindInternal)
	defer func() {
		span.String(tracing.AttrAgent, req.AgentSlug)
		span.String(tracing.AttrRunID, res.RunID)
		span.End(err)
	}()
	if err := checkSubmit(&req); err != nil {
		return lifecycle.SubmitResult{}, err
	}
	agent, ok := s.cat.agents[req.AgentSlug]
	if !ok {
		return lifecycle.SubmitResult{}, &RequestError{Field: "agent_slug", Reason: fmt.Sprintf("unknown agent %q", req.AgentSlug)}
	}
	switch req.Trigger {
	case "":
		req.Trigger = triggerManual
	case triggerManual, triggerCron, triggerEvent:
	default:
		return lifecycle.SubmitResult{}, &RequestError{Field: "trigger", Reason: fmt.Sprintf("%q is not manual, cron or event", req.Trigger)}
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return lifecycle.SubmitResult{}, &RequestError{Field: "input", Reason: "not valid JSON"}
	}
	if req.IdempotencyKey != "" {
		return s.idem.submit(ctx, agent, req)
	}
	runID := newRunID(s.now())
	if err := s.creator.createRun(ctx, agent, req, runID, time.Time{}); err != nil {
		return lifecycle.SubmitResult{}, err
	}
	return lifecycle.SubmitResult{RunID: runID}, nil
}

// newRunID makes an id like run_2026-02-14_080000_abc123 (docs/spec.md#run-status): it
// sorts by time, and 40 random bits make two runs of one second distinct.
func newRunID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "run_" + now.UTC().Format("2006-01-02_150405") + "_" + hex.EncodeToString(b[:])
}

// activeEntry is the body of a run's active index entry: the run's first
// status.json and what its submit knew, so that a poll can finish the
// submit if it stopped before writing the status (finishSubmit).
type activeEntry struct {
	Pending *lifecycle.RunStatus         `json:"pending,omitempty"`
	Input   bool                         `json:"input,omitempty"` // the run has an input.json
	Actor   lifecycle.Actor              `json:"actor,omitempty"`
	Context *lifecycle.TransitionContext `json:"context,omitempty"`
}

// checkSubmit refuses a submit whose text fields break their limits. The
// values' meaning (a known agent, a trigger of the set, JSON input, a key
// of a scheme) is Submit's check, after this one.
func checkSubmit(req *lifecycle.SubmitRequest) error {
	if err := codes.CheckText("agent_slug", req.AgentSlug, codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckText("trigger", req.Trigger, codes.MaxNameBytes, codes.OneLine); err != nil {
		return err
	}
	if err := codes.CheckJSON("input", req.Input, codes.MaxDocumentBytes); err != nil {
		return err
	}
	if err := codes.CheckText("idempotency_key", req.IdempotencyKey, maxIdempotencyKeyBytes, codes.OneLine); err != nil {
		return err
	}
	if err := checkSource(req); err != nil {
		return err
	}
	return checkCaller(&req.Caller)
}

// creator writes new runs (createRun) and records each creation.
type creator struct {
	store    *storage.Store
	now      func() time.Time
	history  *history
	statuses *statuses
	writers  *writers
	inbox    *inbox
}

// createRun writes a new run: its active entry, index entry, input, status
// and audit event, in an order that leaves every run findable whatever
// write a crash stops at. The active entry comes first and carries the
// run's first status.json (activeEntry): from it, a poll finishes a submit
// that stopped before its status was written (finishSubmit), so no run is
// left half-made, and a run with a status always has the active entry that
// recovery looks through. Writing an existing run again (a duplicate of an
// idempotent submit) is a no-op for the parts already there: every key is
// written create-only, and started (zero: now) is the same for every
// writer of one run, so its index entries are the same keys.
func (cr *creator) createRun(ctx context.Context, agent *agentDef, req lifecycle.SubmitRequest, runID string, started time.Time) error {
	idxKey, err := layout.RunIndexKey(runID)
	if err != nil {
		return err
	}
	statusKey, err := layout.RunStatusKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	active, err := layout.RunActiveKey(agent.Slug, runID)
	if err != nil {
		return err
	}
	if started.IsZero() {
		started = cr.now()
	}
	doc := lifecycle.RunStatus{
		RunID:            runID,
		AgentSlug:        agent.Slug,
		Status:           agent.flow.initial,
		Trigger:          req.Trigger,
		StartedAt:        started,
		StepsTotal:       len(agent.Steps),
		ProposalsCreated: []string{},
		IdempotencyKey:   req.IdempotencyKey,
		TenantID:         tenancy.Creating(ctx),
		TraceParent:      tracing.TraceParent(ctx),
	}
	if agent.Machine != lifecycle.MachineCanonical {
		doc.Machine = agent.Machine
	}
	doc.SchemaVersion, doc.UpdatedAt = runStatusSchema, &doc.StartedAt
	setSource(&doc, &req)
	b := callerBy(&req.Caller, lifecycle.ActorGateway, triggerInitiator(req.Trigger))
	b.tc.RunID, b.tc.Timestamp = runID, doc.StartedAt
	doc.LastAudit = cr.writers.auditRecord(&doc, "", b, 1)
	pending, err := json.Marshal(activeEntry{Pending: &doc, Input: len(req.Input) > 0, Actor: b.actor, Context: &b.tc})
	if err != nil {
		return err
	}
	if err := putOnce(ctx, cr.store, active, pending); err != nil {
		return err
	}
	entry, _ := json.Marshal(runIndexEntry{AgentSlug: agent.Slug, Machine: agent.Machine, TenantID: doc.TenantID})
	if err := putOnce(ctx, cr.store, idxKey, entry); err != nil {
		return err
	}
	if err := cr.history.indexCreated(ctx, &doc); err != nil {
		return err
	}
	if len(req.Input) > 0 {
		inKey, err := layout.RunInputKey(agent.Slug, runID)
		if err != nil {
			return err
		}
		if err := putOnce(ctx, cr.store, inKey, req.Input); err != nil {
			return err
		}
	}
	ver, err := records.Create(ctx, cr.store, statusKey, &doc)
	created := err == nil
	if errors.Is(err, storage.ErrPreconditionFailed) {
		doc, ver, err = cr.statuses.read(ctx, agent.Slug, runID, statusKey)
	}
	if err != nil {
		return err
	}
	if created {
		cr.writers.afterCreate(ctx, agent, &doc, b, "run_created")
	}
	w := cr.writers.newWriter(agent.Slug, runID, statusKey, &doc, ver)
	cr.inbox.hand(candidate{slug: agent.Slug, w: w, input: req.Input, inputKnown: true})
	return nil
}

// idempotencyKey is a parsed key: its source and the parts after the scheme.
type idempotencyKey struct {
	Source string
	Parts  []string
}

// parseIdempotencyKey checks a key against the schemes of docs/spec.md#idempotency:
// github:{delivery_id}, api:{client_id}:{request_id},
// slack:{team_id}:{trigger_id}, scheduler:{schedule_id}:{execution_time}
// (the execution time may itself contain colons). Parts are non-empty,
// printable UTF-8 without spaces; the whole key is at most 512 bytes.
func parseIdempotencyKey(key string) (idempotencyKey, error) {
	bad := func(reason string) (idempotencyKey, error) {
		return idempotencyKey{}, fmt.Errorf("%w %q: %s", errInvalidIdempotencyKey, truncate(key, 60), reason)
	}
	if err := codes.CheckText("idempotency_key", key, maxIdempotencyKeyBytes, codes.OneLine); err != nil {
		// Both matchable: errInvalidIdempotencyKey and the *InputError.
		return idempotencyKey{}, fmt.Errorf("%w: %w", errInvalidIdempotencyKey, err)
	}
	if strings.ContainsRune(key, ' ') {
		return bad("contains a space")
	}
	scheme, rest, ok := strings.Cut(key, ":")
	if !ok {
		return bad("no scheme (want github:, api:, slack: or scheduler:)")
	}
	var k idempotencyKey
	switch scheme {
	case "github":
		k = idempotencyKey{Source: idemrecord.SourceGitHub, Parts: []string{rest}}
	case "api", "slack", "scheduler":
		a, b, ok := strings.Cut(rest, ":")
		if !ok {
			return bad(fmt.Sprintf("%s keys have two parts after the scheme", scheme))
		}
		k = idempotencyKey{Source: map[string]string{"api": idemrecord.SourceAPI, "slack": idemrecord.SourceSlack, "scheduler": idemrecord.SourceScheduler}[scheme], Parts: []string{a, b}}
	default:
		return bad(fmt.Sprintf("unknown scheme %q", scheme))
	}
	for _, p := range k.Parts {
		if p == "" {
			return bad("empty part")
		}
	}
	return k, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func requestHash(req lifecycle.SubmitRequest) string {
	h := sha256.New()
	var compact []byte
	if len(req.Input) > 0 {
		compact = compactJSON(req.Input)
	}
	fmt.Fprintf(h, "%s\x00%s\x00", req.AgentSlug, req.Trigger)
	h.Write(compact)
	return hex.EncodeToString(h.Sum(nil))
}

func compactJSON(b []byte) []byte {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return b
	}
	out, err := json.Marshal(v) // map keys sorted: one form per value
	if err != nil {
		return b
	}
	return out
}

// idemAction is what a submit does with its key's record.
type idemAction int

const (
	// idemOwn: this submit holds the record's lease: it creates the run and
	// records the outcome (a new key or generation, a failed key's retry,
	// a lapsed lease taken over).
	idemOwn idemAction = iota
	// idemHelp: another submit holds a live lease: this one completes the
	// creation of the recorded run itself (its writes are create-only, so
	// both writing is harmless), then answers.
	idemHelp
	// idemDone: the record is completed: its run exists.
	idemDone
)

// idemClaim is how a submit stands with its key after reading the record.
type idemClaim struct {
	rec    idemrecord.Record
	action idemAction
	// fresh: a new generation or a failed key's new attempt, answered as
	// a first submit (not a duplicate).
	fresh bool
	// owner names this submit in the record's lease.
	owner string
}

// errKeep ends an Apply that judged the record and need not write it.
var errKeep = errors.New("run: idempotency record kept as is")

// idempotency answers the submits with an idempotency key
// (docs/spec.md#idempotency) through the key's record, and reads a record.
type idempotency struct {
	store   *storage.Store
	now     func() time.Time
	log     *slog.Logger
	metrics Metrics
	cfg     idemConfig
	absent  *evidence.Absence
	gate    *dedupeGate
	creator *creator
}

// idemConfig is what of Config the idempotency flow reads.
type idemConfig struct {
	Owner                   string
	IdempotencyLease        time.Duration
	IdempotencyCompletedTTL time.Duration
	IdempotencyFailedTTL    time.Duration
	IdempotencyMaxAttempts  int
}

// submit is the check-and-set flow of docs/spec.md#idempotency.
// No answer names a run that does not exist when it is given: a submit
// that creates the run answers once it is written, a duplicate of a
// completed key answers its run, and a duplicate whose run may not be
// written yet writes it itself (the same run id, from its own request,
// which hashes alike) or, if it cannot, answers IDEMPOTENCY_IN_PROGRESS
// without an id. Another request under a live key is IDEMPOTENCY_CONFLICT;
// a failed key is retried under the same run id while attempts are left,
// and answers its stored error after.
func (im *idempotency) submit(ctx context.Context, agent *agentDef, req lifecycle.SubmitRequest) (lifecycle.SubmitResult, error) {
	k, err := parseIdempotencyKey(req.IdempotencyKey)
	if err != nil {
		return lifecycle.SubmitResult{}, &RequestError{Field: "idempotency_key", Reason: err.Error()}
	}
	if !tenancy.NamesIDs(ctx) {
		req.IdempotencyKey = tenantScopedKey(tenancy.Creating(ctx), req.IdempotencyKey)
	}
	key := layout.IdempotencyKey(req.IdempotencyKey)
	c, err := im.claimKey(ctx, key, req, k, requestHash(req))
	if err != nil {
		return lifecycle.SubmitResult{}, err
	}
	res, err := im.actOnClaim(ctx, agent, req, key, &c)
	if err != nil {
		return lifecycle.SubmitResult{}, err
	}
	im.metrics.Idempotency(k.Source, res.Duplicate)
	if res.Duplicate {
		im.log.LogAttrs(ctx, slog.LevelInfo, "idempotency_hit", slog.String("key", req.IdempotencyKey), slog.String("cachedRunId", res.RunID))
	}
	return res, nil
}

// claimKey creates the key's record, or judges the existing one (judgeKey).
func (im *idempotency) claimKey(ctx context.Context, key string, req lifecycle.SubmitRequest, k idempotencyKey, hash string) (idemClaim, error) {
	owner := im.cfg.Owner + "#" + randomHex(4)
	var err error
	// The record exists but reads missing when it was deleted (expired)
	// between the create and the read, or on a store that settles, for a
	// moment: the claim starts over, a few times, then the key is busy.
	for range 3 {
		c := idemClaim{owner: owner, fresh: true}
		c.rec = idemrecord.Record{Key: req.IdempotencyKey, Source: k.Source, RequestHash: hash, TenantID: tenancy.Creating(ctx)}
		im.newGeneration(&c.rec, c.owner, im.now())
		_, err = records.Create(ctx, im.store, key, &c.rec)
		if err == nil {
			im.fileExpiry(ctx, key, &c)
		}
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return c, err
		}
		var after idemrecord.Record
		_, after, err = (&fence.Record[idemrecord.Record, *idemrecord.Record]{Store: im.store, Key: key}).Apply(ctx, func(cur *idemrecord.Record) error {
			return im.judgeKey(cur, &c, hash)
		})
		switch {
		case errors.Is(err, errKeep):
			return c, nil
		case err == nil:
			c.rec = after
			return c, nil
		case !errors.Is(err, storage.ErrNotFound):
			return c, err
		}
	}
	return idemClaim{}, &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: err}
}

// judgeKey decides what a submit of hash does with the existing record
// cur, changing it when the submit takes the lease; errKeep when it need
// not be written.
func (im *idempotency) judgeKey(cur *idemrecord.Record, c *idemClaim, hash string) error {
	now := im.now()
	c.action, c.fresh = idemOwn, false
	switch {
	case cur.ExpiredFor(hash, now):
		// A new generation: a new run id, the old one's run left alone.
		c.fresh = true
		prev := cur.RunID
		cur.RequestHash, cur.Response = hash, nil
		im.newGeneration(cur, c.owner, now)
		cur.PreviousRunID = prev
	case cur.RequestHash != hash:
		return &idemrecord.Error{Key: cur.Key, RunID: cur.RunID, Kind: lifecycle.ErrIdempotencyConflict}
	case cur.Status == idemrecord.Completed:
		c.action, c.rec = idemDone, *cur
		return errKeep
	case cur.Status == idemrecord.Failed && cur.Attempts >= im.cfg.IdempotencyMaxAttempts:
		return &IdempotencyFailedError{Key: cur.Key, ErrorCode: cur.ErrorCode, Message: cur.Error, Attempts: cur.Attempts}
	case cur.Status == idemrecord.Processing && cur.LeaseLive(now) && cur.LeaseOwner != c.owner:
		c.action, c.rec = idemHelp, *cur
		return errKeep
	default:
		// A failed key with attempts left, or a lapsed lease: this submit
		// takes the lease and creates the same run.
		c.fresh = cur.Status == idemrecord.Failed
		im.takeLease(cur, c.owner, now)
	}
	return nil
}

// newGeneration starts a record's generation at now: a new run id, held
// by owner.
func (im *idempotency) newGeneration(rec *idemrecord.Record, owner string, now time.Time) {
	rec.RunID, rec.CreatedAt, rec.ExpiresAt = newRunID(now), now, time.Time{}
	rec.Attempts, rec.PreviousRunID = 0, ""
	im.takeLease(rec, owner, now)
}

// takeLease makes owner the record's processing submitter until now plus
// the lease. lock_expires_at is written too, so a process of an earlier
// release reads the lease it knows.
func (im *idempotency) takeLease(rec *idemrecord.Record, owner string, now time.Time) {
	lease := now.Add(im.cfg.IdempotencyLease)
	rec.Status, rec.LeaseOwner, rec.LeaseExpiresAt, rec.LockExpiresAt = idemrecord.Processing, owner, &lease, &lease
	rec.Error, rec.ErrorCode, rec.UpdatedAt = "", "", now
	// A processing generation may hold its run: it lives as long as a
	// completed one would.
	if exp := now.Add(im.cfg.IdempotencyCompletedTTL); rec.ExpiresAt.Before(exp) {
		rec.ExpiresAt = exp
	}
	rec.Attempts++
}

// actOnClaim does what the claim says and answers the submit.
func (im *idempotency) actOnClaim(ctx context.Context, agent *agentDef, req lifecycle.SubmitRequest, key string, c *idemClaim) (lifecycle.SubmitResult, error) {
	runID := c.rec.RunID
	switch c.action {
	case idemDone:
		return lifecycle.SubmitResult{RunID: runID, Duplicate: true}, nil
	case idemHelp:
		if err := im.ensureRun(ctx, agent, req, c); err != nil {
			im.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_in_progress", slog.String("key", req.IdempotencyKey),
				slog.String("runId", runID), slog.String("error", err.Error()))
			return lifecycle.SubmitResult{}, &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: err}
		}
		im.recordOutcome(ctx, key, c, nil)
		return lifecycle.SubmitResult{RunID: runID, Duplicate: true}, nil
	}
	createErr := im.ensureRun(ctx, agent, req, c)
	if d, ok := errors.AsType[*deferredError](createErr); ok {
		return im.answerEarlier(ctx, req, c, d.winner)
	}
	var busy *IdempotencyInProgressError
	if !errors.As(createErr, &busy) {
		// A run not yet known to be missing is no outcome: the record
		// stays processing under this submit's lease, and a retry goes on
		// where it stopped (recorded as a failure, it used up the key's
		// attempts and then answered that failure for good).
		im.recordOutcome(ctx, key, c, createErr)
	}
	if createErr != nil {
		return lifecycle.SubmitResult{}, createErr
	}
	return lifecycle.SubmitResult{RunID: runID, Duplicate: !c.fresh}, nil
}

// ensureRun makes the claim's run exist: created by this submit, or found
// written (a submit of the same generation wrote it). A run that may exist
// is read first, so a finished run is not given its first entries again.
func (im *idempotency) ensureRun(ctx context.Context, agent *agentDef, req lifecycle.SubmitRequest, c *idemClaim) error {
	if err := im.gate.markRun(ctx, c); err != nil {
		return err
	}
	if !c.fresh || c.rec.Attempts > 1 {
		statusKey, err := layout.RunStatusKey(agent.Slug, c.rec.RunID)
		if err != nil {
			return err
		}
		_, _, err = im.store.Get(ctx, statusKey)
		switch {
		case err == nil:
			im.absent.Found(statusKey)
			return nil
		case !errors.Is(err, storage.ErrNotFound):
			return err
		case !im.absent.Confirmed(statusKey, im.now()):
			// One not-found of a store that settles: creating the run
			// now could land its first status over the live one and run
			// it again, so the key is busy until the absence is sure.
			return &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: err}
		}
	}
	// On a store that settles the record's create (or a rival's) may have
	// landed over another generation's: an earlier run of the key, found
	// now, is answered instead of creating a second one for the gate to
	// end.
	if w, ok := im.gate.earlier(ctx, c); ok {
		return &deferredError{winner: w}
	}
	// The run's start is its generation's: every submit that creates it
	// writes the same entries.
	return im.creator.createRun(ctx, agent, req, c.rec.RunID, c.rec.CreatedAt)
}

// deferredError: the run of a claim is not created, because an earlier
// run holds its key (dedupeGate.earlier).
type deferredError struct{ winner idemrecord.Marker }

func (e *deferredError) Error() string {
	return fmt.Sprintf("run: idempotency key %s is held by the earlier run %s", e.winner.Key, e.winner.RunID)
}

// answerEarlier answers a submit whose new generation found an earlier run
// of its key (ensureRun): the record is pointed back at that run and its
// marker taken back, and the submit is answered the earlier run as a
// duplicate once it exists, else IDEMPOTENCY_IN_PROGRESS (without an id:
// its creator, or a retry, writes it).
func (im *idempotency) answerEarlier(ctx context.Context, req lifecycle.SubmitRequest, c *idemClaim, winner idemrecord.Marker) (lifecycle.SubmitResult, error) {
	im.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_earlier_run", slog.String("key", req.IdempotencyKey),
		slog.String("runId", c.rec.RunID), slog.String("earlier", winner.RunID))
	mine := &lifecycle.RunStatus{RunID: c.rec.RunID, IdempotencyKey: c.rec.Key}
	exists := im.gate.repairRecord(ctx, mine, winner)
	im.gate.dropMarker(ctx, c)
	if !exists {
		return lifecycle.SubmitResult{}, &IdempotencyInProgressError{Key: req.IdempotencyKey, Err: &deferredError{winner: winner}}
	}
	return lifecycle.SubmitResult{RunID: winner.RunID, Duplicate: true}, nil
}

// markRun writes the claim's run marker, on a store that settles.
func (g *dedupeGate) markRun(ctx context.Context, c *idemClaim) error {
	if g.settle <= 0 {
		return nil
	}
	key, err := layout.IdempotencyRunKey(c.rec.Key, c.rec.RunID)
	if err != nil {
		return err
	}
	m := idemrecord.Marker{Key: c.rec.Key, RunID: c.rec.RunID, RequestHash: c.rec.RequestHash, CreatedAt: c.rec.CreatedAt,
		ExpiresAt: c.rec.CreatedAt.Add(g.completedTTL), Replaces: c.rec.PreviousRunID}
	if _, err := records.Create(ctx, g.store, key, &m); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	return nil
}

// recordOutcome writes the claim's outcome into the record: completed
// (by any submit that saw the run written), or failed (only by the lease's
// holder, never over a completed record). A failure to write is logged:
// the run exists, and the next duplicate finds it.
func (im *idempotency) recordOutcome(ctx context.Context, key string, c *idemClaim, createErr error) {
	_, _, err := (&fence.Record[idemrecord.Record, *idemrecord.Record]{Store: im.store, Key: key}).Apply(ctx, func(cur *idemrecord.Record) error {
		if cur.RunID != c.rec.RunID || cur.Status == idemrecord.Completed {
			return errKeep // done, or a later generation
		}
		now := im.now()
		if createErr == nil {
			cur.Status, cur.ExpiresAt, cur.UpdatedAt = idemrecord.Completed, now.Add(im.cfg.IdempotencyCompletedTTL), now
			cur.Response, _ = json.Marshal(map[string]string{"run_id": cur.RunID})
		} else {
			if cur.Status != idemrecord.Processing || cur.LeaseOwner != c.owner {
				return errKeep // another submit holds it now
			}
			cur.Status, cur.Error, cur.ErrorCode = idemrecord.Failed, createErr.Error(), lifecycle.ErrorCode(createErr)
			cur.ExpiresAt, cur.UpdatedAt = now.Add(im.cfg.IdempotencyFailedTTL), now
		}
		cur.LeaseOwner, cur.LeaseExpiresAt, cur.LockExpiresAt = "", nil, nil
		return nil
	})
	if err != nil && !errors.Is(err, errKeep) {
		im.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_record_update_failed", slog.String("key", c.rec.Key), slog.String("error", err.Error()))
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// read: see Runner.idempotency.
func (im *idempotency) read(ctx context.Context, key string) (idemrecord.Record, error) {
	if err := codes.CheckText("idempotency_key", key, maxIdempotencyKeyBytes, codes.OneLine); err != nil {
		return idemrecord.Record{}, err
	}
	if _, err := parseIdempotencyKey(key); err != nil {
		return idemrecord.Record{}, &RequestError{Field: "idempotency_key", Reason: err.Error()}
	}
	return idemrecord.Read(ctx, im.store, im.now(), key)
}

// runIndexEntry is the body of index/runs/{runId}.json.
type runIndexEntry struct {
	AgentSlug string `json:"agent_slug"`
	Machine   string `json:"machine,omitempty"`
	// TenantID is the run's tenant, so that a read confines by it before
	// reading the run (empty: the default tenant, and every entry written
	// before tenants).
	TenantID string `json:"tenant_id,omitempty"`
}

// checkCaller refuses a Caller that breaks the input limits.
func checkCaller(c *lifecycle.Caller) error {
	tc := lifecycle.TransitionContext{UserID: c.UserID, Initiator: c.Initiator, Metadata: c.Metadata}
	return codes.CheckContext(&tc)
}

// tenantScopedKey is the idempotency key as kept and hashed for tenant
// (docs/design.md#tenants): the default tenant's is the key itself, so
// keys written before tenants still catch duplicates; another tenant's
// names the tenant, so two tenants' equal keys are two keys.
func tenantScopedKey(tenant, key string) string {
	if tenant == "" {
		return key
	}
	return "tenant:" + tenant + "|" + key
}
