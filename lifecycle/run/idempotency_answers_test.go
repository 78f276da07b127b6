package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// TestIdempotencyAnswers holds the rule of every idempotent answer: it
// names a run that exists when it is given, or no run at all. Each case
// leaves a key in some state (a submitter that died after its record, a
// store failing the run's writes, a failed key out of attempts, a record
// of the previous release) and checks the next submit's answer.
func TestIdempotencyAnswers(t *testing.T) {
	t.Parallel()
	type env struct {
		t      *testing.T
		g      *rig
		faulty *faultyStore
		r      *run.Runner
		req    lifecycle.SubmitRequest
	}
	// diedAfterRecord: the first submitter wrote its record, then nothing.
	diedAfterRecord := func(e *env) {
		e.faulty.fail(0, 1, isStatus)
		e.faulty.fail(1, 1, isIdempotency) // the create passes; the failed mark does not
		if _, err := e.r.Submit(context.Background(), e.req); err == nil {
			e.t.Fatal("first submit succeeded")
		}
	}
	cases := []struct {
		name    string
		prepare func(e *env)
		// then checks the answer of the next submit of e.req.
		then func(e *env, res lifecycle.SubmitResult, err error)
	}{
		{"duplicate of a processing key whose run was never written writes it", diedAfterRecord,
			func(e *env, res lifecycle.SubmitResult, err error) {
				if err != nil || !res.Duplicate || res.RunID == "" {
					e.t.Fatalf("duplicate: %+v %v", res, err)
				}
			}},
		{"duplicate that cannot write the run is told in progress, without an id", func(e *env) {
			diedAfterRecord(e)
			e.faulty.fail(0, 1, isStatus)
		}, func(e *env, res lifecycle.SubmitResult, err error) {
			if !errors.Is(err, lifecycle.ErrIdempotencyInProgress) || lifecycle.ErrorCode(err) != codes.IdempotencyInProgress ||
				codes.HTTPStatus(lifecycle.ErrorCode(err)) != 409 || res.RunID != "" {
				e.t.Fatalf("answer %+v %v", res, err)
			}
			// The next retry writes it.
			res, err = e.r.Submit(context.Background(), e.req)
			if err != nil || res.RunID == "" {
				e.t.Fatalf("retry: %+v %v", res, err)
			}
			mustExist(e.t, e.r, res.RunID)
		}},
		{"failed key out of attempts answers the stored error", func(e *env) {
			for i := range 3 {
				e.faulty.fail(0, 1, isStatus)
				if _, err := e.r.Submit(context.Background(), e.req); !errors.Is(err, errInjected) {
					e.t.Fatalf("attempt %d: %v", i+1, err)
				}
			}
		}, func(e *env, res lifecycle.SubmitResult, err error) {
			var fe *run.IdempotencyFailedError
			if !errors.As(err, &fe) || !strings.Contains(fe.Message, "injected") || fe.Attempts != 3 || res.RunID != "" {
				e.t.Fatalf("answer %+v %v", res, err)
			}
		}},
		{"another request under a processing key is a conflict", func(e *env) {
			diedAfterRecord(e)
			e.req.Input = json.RawMessage(`{"other":true}`)
		}, func(e *env, res lifecycle.SubmitResult, err error) {
			if !errors.Is(err, lifecycle.ErrIdempotencyConflict) || res.RunID != "" {
				e.t.Fatalf("answer %+v %v", res, err)
			}
		}},
		{"a processing record of the previous release, lock live", func(e *env) {
			diedAfterRecord(e)
			toPreviousRelease(e.t, e.g.store, e.req.IdempotencyKey, e.g.clock.Now().Add(5*time.Minute))
		}, func(e *env, res lifecycle.SubmitResult, err error) {
			if err != nil || !res.Duplicate {
				e.t.Fatalf("answer %+v %v", res, err)
			}
		}},
		{"a processing record of the previous release, lock lapsed", func(e *env) {
			diedAfterRecord(e)
			toPreviousRelease(e.t, e.g.store, e.req.IdempotencyKey, e.g.clock.Now().Add(5*time.Minute))
			e.g.clock.Advance(6 * time.Minute)
		}, func(e *env, res lifecycle.SubmitResult, err error) {
			if err != nil || !res.Duplicate {
				e.t.Fatalf("answer %+v %v", res, err)
			}
			rec, _ := e.r.Idempotency(context.Background(), e.req.IdempotencyKey)
			if rec.Status != idemrecord.Completed || rec.RunID != res.RunID || rec.Attempts != 2 {
				e.t.Errorf("record %+v", rec)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			faulty := &faultyStore{Store: memStore(t)}
			g := newRig(t, storage.New(faulty))
			agent := run.Agent{Slug: "answers", Steps: []run.Step{okStep("s")}}
			r, _ := g.runner("a", nil, agent)
			e := &env{t: t, g: g, faulty: faulty, r: r,
				req: lifecycle.SubmitRequest{AgentSlug: agent.Slug, IdempotencyKey: "api:client:" + strings.ReplaceAll(c.name, " ", "-")}}
			c.prepare(e)
			first, _ := r.Idempotency(context.Background(), e.req.IdempotencyKey)
			res, err := r.Submit(context.Background(), e.req)
			if res.RunID != "" {
				mustExist(t, r, res.RunID) // at the moment it is given
				if first.RunID != "" && res.RunID != first.RunID {
					t.Errorf("answered %s, the key's run is %s", res.RunID, first.RunID)
				}
			}
			c.then(e, res, err)
			if res.RunID != "" {
				if st := g.wait(r, res.RunID, 0, 0); st.Status != "completed" {
					t.Errorf("run %s", st.Status)
				}
			}
		})
	}
}

func mustExist(t *testing.T, r *run.Runner, runID string) {
	t.Helper()
	if _, err := r.Status(context.Background(), runID); err != nil {
		t.Fatalf("answered run %s: %v", runID, err)
	}
}

// toPreviousRelease rewrites a key's record as the previous release wrote
// it: a lock (lock_expires_at, also its expires_at) and no lease owner.
func toPreviousRelease(t *testing.T, s *storage.Store, clientKey string, lock time.Time) {
	t.Helper()
	key := layout.IdempotencyKey(clientKey)
	b, ver, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "lease_owner")
	delete(m, "lease_expires_at")
	m["lock_expires_at"], m["expires_at"] = lock.UTC().Format(time.RFC3339Nano), lock.UTC().Format(time.RFC3339Nano)
	b, _ = json.Marshal(m)
	if _, err := s.Put(context.Background(), key, b, storage.IfMatch(ver)); err != nil {
		t.Fatal(err)
	}
}
