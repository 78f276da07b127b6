// Package artifact is the artifact model (docs/spec.md#artifact): the record, the
// three content types and their schemas, and a store that writes each
// artifact once per job, finalized, never modifies it, and deletes only in
// the admin's cleanup of old artifacts. Every call takes the caller's actor
// and checks the authority matrix (docs/spec.md#authority-matrix) before it writes anything.
//
// Invariant F3 rests on two properties of this package: an artifact's id is
// derived from its job's id (IDForJob), so however often a job is retried
// there is one key its artifact can live at; the job queue's writes carry
// the claim's fencing epoch (Draft.Epoch), so the newest attempt's write
// wins inside the conditional write and a lost attempt's never replaces
// it; and an artifact is written finalized in that one write, so no reader
// ever sees a partial one.
package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// Artifact is an artifact record, projects/{cid}/artifacts/{artifact_id}.json
// (docs/spec.md#artifact): the types package's, so the Go client reads
// the same type the store writes.
type Artifact = lifecycle.Artifact

// Draft is what a writer supplies to Create; the store fills in the id,
// times, finalization, version and URL. Its text is bounded: at most
// 256 tags (256 bytes each), entity refs and
// sources (1,024 bytes per ref, 4,096 bytes per
// excerpt), content of at most 1 MiB, all valid UTF-8
// without NUL; Create refuses more with a *lifecycle.InputError.
type Draft struct {
	JobID      string
	RunID      string
	Type       Type
	AgentSlug  string
	EntityRefs []string
	Tags       []string
	Content    json.RawMessage
	Sources    []lifecycle.SourceRef
	// TenantID is the tenant of the job writing it ("" the default).
	TenantID string
	// Epoch, when not 0, is the writer's fencing epoch (a job claim's):
	// the write is fenced (see Create). 0 writes create-once, unfenced.
	Epoch int64
	// Audited: the caller records the artifact's creation in an audit
	// event of its own (the job queue does, in the audit batch of the job
	// that points at it), so Create writes no artifact.create event. A
	// replacement (artifact.replace) is still recorded here.
	Audited bool
}

// IDForJob is the id of the one artifact job jobID can have:
// "art-" and a UUID-shaped digest (RFC 9562 version 8) of the job id. It is
// the same on every retry and every worker, which is what makes the
// artifact create-once per job.
func IDForJob(jobID string) string {
	sum := sha256.Sum256([]byte("conveyor/artifact/" + jobID))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(b)
	return "art-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// defaultCleanupAge is Config.CleanupAge's default: the admin's cleanup may
// delete artifacts created more than 30 days ago.
const defaultCleanupAge = 30 * 24 * time.Hour

// Config configures a Store.
type Config struct {
	// Store holds the artifacts and the audit log. Required.
	Store *storage.Store
	// Clock stamps created_at and finalized_at and ages artifacts for
	// cleanup. Default: the wall clock.
	Clock clock.Clock
	// Node names this host in audit events. Default: "".
	Node string
	// BaseURL, when set, makes each artifact's url BaseURL + "/" + its key,
	// e.g. "https://minio.internal/bucket". Default: no url.
	BaseURL string
	// CleanupAge is the cleanup age (docs/spec.md#artifact): only artifacts older than
	// this may be deleted, and only by the admin. Default: 30 days.
	CleanupAge time.Duration
	// Logger receives audit write failures. Default: slog.Default().
	Logger *slog.Logger
	// Project is the cid that Get, GetForJob and List read when given an
	// empty one: a job without a project_id has its artifact there. The job
	// queue's own store gets the queue's Config.Project. Default: none (an
	// empty cid is refused).
	Project string
	// Types are content types of the user's beside the three built-in ones, each
	// with its content check: content must be JSON, and the check (nil:
	// none) may refuse it; its error is wrapped to match
	// ErrInvalidArtifact. Names are ids (storage.ErrInvalidID) and may not be
	// a built-in type's.
	Types map[Type]func(content json.RawMessage) error
}

// Store reads and writes artifacts. It is safe for concurrent use.
type Store struct {
	cfg   Config
	audit *records.AuditLog
}

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Store == nil {
		return nil, errors.New("artifact: Config.Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.CleanupAge <= 0 {
		cfg.CleanupAge = defaultCleanupAge
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for t := range cfg.Types {
		if err := storekey.ValidateID("artifact type", string(t)); err != nil {
			return nil, fmt.Errorf("artifact: Config.Types: %w", err)
		}
		if slices.Contains(builtinTypes(), t) {
			return nil, fmt.Errorf("artifact: Config.Types: %s is a built-in type", t)
		}
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	return &Store{cfg: cfg, audit: &records.AuditLog{Store: cfg.Store, Node: cfg.Node, Now: cfg.Clock.Now}}, nil
}

func (d *Draft) validate(cid string, types map[Type]func(json.RawMessage) error) error {
	if err := storekey.ValidateID("project id", cid); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArtifact, err)
	}
	if err := storekey.ValidateID("job id", d.JobID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArtifact, err)
	}
	if d.RunID != "" {
		if err := storekey.ValidateID("run id", d.RunID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArtifact, err)
		}
	}
	if err := storekey.ValidateID("agent slug", d.AgentSlug); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArtifact, err)
	}
	if err := d.checkText(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArtifact, err)
	}
	for i, s := range d.Sources {
		if s.Ref == "" {
			return invalid(fmt.Sprintf("sources[%d].ref", i), "empty")
		}
	}
	if check, ok := types[d.Type]; ok {
		if !json.Valid(d.Content) {
			return invalid("content", "not valid JSON")
		}
		if check == nil {
			return nil
		}
		if err := check(d.Content); err != nil {
			if errors.Is(err, ErrInvalidArtifact) {
				return err
			}
			return fmt.Errorf("%w: content: %w", ErrInvalidArtifact, err)
		}
		return nil
	}
	return ValidateContent(d.Type, d.Content)
}

// checkText bounds the free text of a draft (issue 10 F) with the one
// lifecycle check, before the content is parsed: tags (MaxNameBytes), entity
// and source refs (MaxRefBytes), excerpts (MaxTextBytes), each list at most
// MaxListLen items, and the content (MaxDocumentBytes). It returns nil or a
// *lifecycle.InputError.
func (d *Draft) checkText() error {
	for _, l := range []struct {
		field string
		items []string
		limit int
	}{{"tags", d.Tags, codes.MaxNameBytes}, {"entity_refs", d.EntityRefs, codes.MaxRefBytes}} {
		if err := codes.CheckList(l.field, len(l.items)); err != nil {
			return err
		}
		for i, v := range l.items {
			if err := codes.CheckText(fmt.Sprintf("%s[%d]", l.field, i), v, l.limit, codes.OneLine); err != nil {
				return err
			}
		}
	}
	if err := codes.CheckList("sources", len(d.Sources)); err != nil {
		return err
	}
	for i, s := range d.Sources {
		if err := codes.CheckText(fmt.Sprintf("sources[%d].ref", i), s.Ref, codes.MaxRefBytes, codes.OneLine); err != nil {
			return err
		}
		if err := codes.CheckText(fmt.Sprintf("sources[%d].excerpt", i), s.Excerpt, codes.MaxTextBytes, codes.MultiLine); err != nil {
			return err
		}
	}
	return codes.CheckBytes("content", d.Content, codes.MaxDocumentBytes)
}

// Create writes the artifact of draft's job, finalized, and reports
// whether this call wrote it. The actor needs WriteNew (docs/spec.md#authority-matrix); a
// refusal or an invalid draft writes nothing.
//
// Unfenced (Draft.Epoch 0) it is create-once: when the job already has its
// artifact it returns the stored one, unchanged, with created false and no
// error (the idempotent write of docs/spec.md#artifact).
//
// Fenced (Draft.Epoch > 0, the epoch of the job claim writing it) the
// artifact records its writer's epoch and a newer epoch wins, decided
// inside the conditional write, as for every fenced record: a stored
// artifact of the same epoch is returned unchanged (created false); one of an older
// epoch, left by an attempt that lost its job and can therefore back no
// COMPLETE job, is replaced by compare-and-swap on its version; one of a
// newer epoch makes Create fail with an error matching lifecycle.ErrLeaseLost,
// having written nothing.
func (s *Store) Create(ctx context.Context, actor lifecycle.Actor, cid string, d Draft) (Artifact, bool, error) {
	key, a, err := s.draft(actor, cid, d)
	if err != nil {
		return Artifact{}, false, err
	}
	if d.Epoch > 0 {
		return s.createFenced(ctx, actor, key, a, d.Audited)
	}
	if s.cfg.Store.SettleTime() > 0 {
		// A store that settles may take the create-only write below over
		// the artifact: one found is answered as it stands, unwritten.
		existing, _, err := records.Read[Artifact](ctx, s.cfg.Store, key)
		if err == nil {
			return existing, false, nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return Artifact{}, false, err
		}
	}
	_, err = records.Create(ctx, s.cfg.Store, key, &a)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		existing, _, err := records.Read[Artifact](ctx, s.cfg.Store, key)
		if err != nil {
			return Artifact{}, false, err
		}
		return existing, false, nil
	}
	if err != nil {
		return Artifact{}, false, err
	}
	if !d.Audited {
		s.record(ctx, lifecycle.AuditEvent{Event: "artifact.create", Actor: string(actor), JobID: a.JobID,
			RunID: a.RunID, ArtifactID: a.ArtifactID, To: "finalized", TS: a.CreatedAt})
	}
	return a, true, nil
}

// CreateWrite is Create of a fenced draft (Draft.Epoch > 0, Audited) as
// a write for the caller to commit with its own writes on a store that
// commits several keys at once (storage.Store.Commit), over the Store's
// own: a create-only write of the artifact, and the artifact as it reads
// once the write lands. It writes nothing. A commit refused by the
// write's condition means the job has an artifact already: Create then
// decides by the epochs, as for any fenced write.
func (s *Store) CreateWrite(actor lifecycle.Actor, cid string, d Draft) (Artifact, storage.Write, error) {
	if d.Epoch <= 0 || !d.Audited {
		return Artifact{}, storage.Write{}, invalid("epoch", "a committed write is a fenced, audited draft's")
	}
	key, a, err := s.draft(actor, cid, d)
	if err != nil {
		return Artifact{}, storage.Write{}, err
	}
	a.Version = 1
	b, err := json.Marshal(&a)
	if err != nil {
		return Artifact{}, storage.Write{}, err
	}
	return a, storage.Write{Key: key, Value: b, Cond: storage.IfNotExists()}, nil
}

// draft checks d for Create and builds its artifact, at its key.
func (s *Store) draft(actor lifecycle.Actor, cid string, d Draft) (string, Artifact, error) {
	if err := authority.Check(actor, authority.Artifacts, authority.WriteNew, authority.Scope{}); err != nil {
		return "", Artifact{}, err
	}
	if err := d.validate(cid, s.cfg.Types); err != nil {
		return "", Artifact{}, err
	}
	if d.Epoch < 0 {
		return "", Artifact{}, invalid("epoch", "negative (%d)", d.Epoch)
	}
	id := IDForJob(d.JobID)
	key, err := layout.ArtifactKey(cid, id)
	if err != nil {
		return "", Artifact{}, err
	}
	now := s.cfg.Clock.Now().UTC()
	a := Artifact{
		ArtifactID:  id,
		JobID:       d.JobID,
		RunID:       d.RunID,
		Type:        d.Type,
		AgentSlug:   d.AgentSlug,
		CreatedAt:   now,
		Finalized:   true,
		FinalizedAt: &now,
		EntityRefs:  d.EntityRefs,
		Tags:        d.Tags,
		Content:     d.Content,
		Sources:     d.Sources,
		ProjectID:   cid,
		TenantID:    d.TenantID,
		Epoch:       d.Epoch,
	}
	if s.cfg.BaseURL != "" {
		a.URL = s.cfg.BaseURL + "/" + key
	}
	return key, a, nil
}

// createFenced is Create of a draft with an epoch, through the core's
// fenced write: create-only, and on a conflict the stored artifact's epoch
// decides, the replacement being conditional on the version whose epoch
// was judged.
func (s *Store) createFenced(ctx context.Context, actor lifecycle.Actor, key string, a Artifact, audited bool) (Artifact, bool, error) {
	var (
		own      *Artifact // this claim's own artifact, written before
		replaced int64     // the epoch replaced, when not a create
	)
	build := func(old []byte, ver storage.Version) ([]byte, bool, error) {
		own, replaced, a.Version = nil, -1, 1
		if old != nil {
			var o Artifact
			if err := json.Unmarshal(old, &o); err != nil {
				return nil, false, &lifecycle.QuarantinedError{Key: key, Version: string(ver), Data: old, Reason: "cannot decode", Err: err}
			}
			if o.Epoch == a.Epoch {
				own = &o
				return nil, true, nil
			}
			// A lost attempt's artifact: it backs no COMPLETE job (that
			// takes the lost attempt's lease), so the newer attempt
			// replaces it.
			replaced, a.Version = o.Epoch, o.Version+1
		}
		b, err := json.Marshal(&a)
		return b, false, err
	}
	if _, err := fence.PutFunc(ctx, s.cfg.Store, key, string(actor), a.Epoch, artifactEpoch, build); err != nil {
		return Artifact{}, false, err
	}
	if own != nil {
		return *own, false, nil
	}
	ev := lifecycle.AuditEvent{Event: "artifact.create", Actor: string(actor), JobID: a.JobID,
		RunID: a.RunID, ArtifactID: a.ArtifactID, To: "finalized", TS: a.CreatedAt}
	if replaced >= 0 {
		ev.Event, ev.From = "artifact.replace", fmt.Sprintf("stale epoch %d", replaced)
	}
	if replaced >= 0 || !audited {
		s.record(ctx, ev)
	}
	return a, true, nil
}

// artifactEpoch reads the epoch of a stored artifact for the fenced write.
func artifactEpoch(b []byte) (int64, bool) {
	var a struct {
		Epoch int64 `json:"epoch"`
	}
	if json.Unmarshal(b, &a) != nil {
		return 0, false
	}
	return a.Epoch, true
}

func (s *Store) record(ctx context.Context, ev lifecycle.AuditEvent) {
	if _, err := s.audit.Record(ctx, ev); err != nil {
		s.cfg.Logger.ErrorContext(ctx, "artifact: audit write failed", "event", ev.Event, "artifact_id", ev.ArtifactID, "err", err)
	}
}

// Get reads an artifact of project cid (empty: Config.Project). The actor
// needs Read (docs/spec.md#authority-matrix). A missing artifact gives an
// error matching storage.ErrNotFound.
func (s *Store) Get(ctx context.Context, actor lifecycle.Actor, cid, id string) (Artifact, error) {
	if err := authority.Check(actor, authority.Artifacts, authority.Read, authority.Scope{}); err != nil {
		return Artifact{}, err
	}
	key, err := layout.ArtifactKey(s.project(cid), id)
	if err != nil {
		return Artifact{}, err
	}
	a, _, err := records.Read[Artifact](ctx, s.cfg.Store, key)
	if err == nil && !tenancy.Sees(ctx, a.TenantID) {
		// Another tenant's answers as missing, word for word.
		return Artifact{}, &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound}
	}
	return a, err
}

// GetForJob reads the artifact of job jobID, if it has one, in project
// cid: the job's project_id, which may be empty (Config.Project).
func (s *Store) GetForJob(ctx context.Context, actor lifecycle.Actor, cid, jobID string) (Artifact, error) {
	if err := storekey.ValidateID("job id", jobID); err != nil {
		return Artifact{}, err
	}
	return s.Get(ctx, actor, cid, IDForJob(jobID))
}

// project is cid, or Config.Project for an empty cid.
func (s *Store) project(cid string) string {
	if cid == "" {
		return s.cfg.Project
	}
	return cid
}

// List yields the artifacts of project cid (empty: Config.Project) in key
// order. The actor needs Read.
func (s *Store) List(ctx context.Context, actor lifecycle.Actor, cid string) iter.Seq2[Artifact, error] {
	return func(yield func(Artifact, error) bool) {
		if err := authority.Check(actor, authority.Artifacts, authority.Read, authority.Scope{}); err != nil {
			yield(Artifact{}, err)
			return
		}
		prefix, err := layout.ArtifactsPrefix(s.project(cid))
		if err != nil {
			yield(Artifact{}, err)
			return
		}
		for key, err := range s.cfg.Store.List(ctx, prefix) {
			if err != nil {
				yield(Artifact{}, err)
				return
			}
			a, _, err := records.Read[Artifact](ctx, s.cfg.Store, key)
			if errors.Is(err, storage.ErrNotFound) {
				continue // cleaned up since listing
			}
			if !yield(a, err) || err != nil {
				return
			}
		}
	}
}

// Delete removes one artifact. The spec (docs/spec.md#artifact) forbids deleting artifacts
// for every component except the admin's cleanup after N days
// (Config.CleanupAge): any other actor, or the admin on a younger
// artifact, gets a FORBIDDEN error and nothing is deleted.
func (s *Store) Delete(ctx context.Context, actor lifecycle.Actor, cid, id string) error {
	if err := authority.Check(actor, authority.Artifacts, authority.Delete, authority.Scope{Cleanup: true}); err != nil {
		return err
	}
	key, err := layout.ArtifactKey(cid, id)
	if err != nil {
		return err
	}
	a, ver, err := records.Read[Artifact](ctx, s.cfg.Store, key)
	if err != nil {
		return err
	}
	return s.deleteOld(ctx, actor, key, a, ver)
}

func (s *Store) deleteOld(ctx context.Context, actor lifecycle.Actor, key string, a Artifact, ver storage.Version) error {
	now := s.cfg.Clock.Now()
	old := now.Sub(a.CreatedAt) > s.cfg.CleanupAge
	if err := authority.Check(actor, authority.Artifacts, authority.Delete, authority.Scope{Cleanup: old}); err != nil {
		var fe *authority.ForbiddenError
		if errors.As(err, &fe) && !old {
			fe.Reason = fmt.Sprintf("artifact %s is %s old; cleanup deletes only artifacts older than %s",
				a.ArtifactID, now.Sub(a.CreatedAt).Round(time.Second), s.cfg.CleanupAge)
		}
		return err
	}
	if err := s.cfg.Store.Delete(ctx, key, storage.IfMatch(ver)); err != nil {
		return err
	}
	s.record(ctx, lifecycle.AuditEvent{Event: "artifact.delete", Actor: string(actor), JobID: a.JobID,
		RunID: a.RunID, ArtifactID: a.ArtifactID, From: "finalized"})
	return nil
}

// Cleanup is the admin's cleanup (docs/spec.md#artifact): it deletes every
// artifact of project cid created more than Config.CleanupAge ago and
// returns their ids. Only the admin may run it.
func (s *Store) Cleanup(ctx context.Context, actor lifecycle.Actor, cid string) ([]string, error) {
	if err := authority.Check(actor, authority.Artifacts, authority.Delete, authority.Scope{Cleanup: true}); err != nil {
		return nil, err
	}
	prefix, err := layout.ArtifactsPrefix(cid)
	if err != nil {
		return nil, err
	}
	var deleted []string
	for key, err := range s.cfg.Store.List(ctx, prefix) {
		if err != nil {
			return deleted, err
		}
		a, ver, err := records.Read[Artifact](ctx, s.cfg.Store, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return deleted, err
		}
		if s.cfg.Clock.Now().Sub(a.CreatedAt) <= s.cfg.CleanupAge {
			continue
		}
		if err := s.deleteOld(ctx, actor, key, a, ver); err != nil {
			if errors.Is(err, storage.ErrPreconditionFailed) {
				continue // deleted by a concurrent cleanup
			}
			return deleted, err
		}
		deleted = append(deleted, a.ArtifactID)
	}
	return deleted, nil
}
