package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

var t0 = time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)

func newBox(t testing.TB, s *storage.Store, c clock.Clock) *inbox.Box {
	t.Helper()
	b, err := inbox.New(inbox.Config{Store: s, Clock: c, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sub(id string) lifecycle.InboxSubmission {
	return lifecycle.InboxSubmission{ID: id,
		Source: lifecycle.InboxSource{Type: "ui", Identity: "owner"},
		Intent: lifecycle.InboxIntent{Action: "propose-edit", Target: "notes/violin.pp.ua/sonata-bwv1001"}}
}

func keys(t testing.TB, s *storage.Store, prefix string) []string {
	t.Helper()
	var out []string
	for k, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

func list(t testing.TB, b *inbox.Box, o inbox.ListOptions) []string {
	t.Helper()
	var out []string
	for e, err := range b.List(context.Background(), o) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.ID+":"+string(e.Status))
	}
	return out
}

func TestLifecycle(t *testing.T) {
	env.Each(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		b := newBox(t, s, clk)
		gw := lifecycle.ActorGateway
		e, err := b.Submit(ctx, gw, sub(""))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.ID, "inbox_2026-02-14_") || e.Status != lifecycle.InboxPending || e.Metadata.TTLHours != 72 ||
			e.Metadata.Priority != "normal" || !e.CreatedAt.Equal(t0) {
			t.Fatalf("submitted %+v", e)
		}
		for _, id := range []string{"inbox_a", "inbox_b", "inbox_c"} {
			if _, err := b.Submit(ctx, gw, sub(id)); err != nil {
				t.Fatal(err)
			}
		}
		p, err := b.Process(ctx, gw, "inbox_a", "proposal-1")
		if err != nil || p.Status != lifecycle.InboxProcessed || p.ProposalID != "proposal-1" {
			t.Fatalf("process %+v %v", p, err)
		}
		r, err := b.Reject(ctx, gw, "inbox_b", "target does not resolve")
		if err != nil || r.Status != lifecycle.InboxRejected || r.RejectionReason != "target does not resolve" {
			t.Fatalf("reject %+v %v", r, err)
		}
		if _, err := b.Process(ctx, gw, "inbox_b", "proposal-2"); !errors.Is(err, lifecycle.ErrTerminalState) {
			t.Fatalf("processing a rejected entry: %v", err)
		}
		// 71h59m: nothing expires; 72h: the two pending ones do.
		clk.Advance(72*time.Hour - time.Minute)
		if moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem); err != nil || len(moved) != 0 {
			t.Fatalf("early expiry %v %v", moved, err)
		}
		clk.Advance(time.Minute)
		moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem)
		if err != nil || len(moved) != 2 {
			t.Fatalf("expiry %v %v", moved, err)
		}
		if k := keys(t, s, "inbox/expired/"); len(k) != 2 {
			t.Fatalf("expired objects %v", k)
		}
		got, err := b.Get(ctx, "inbox_c")
		if err != nil || got.Status != lifecycle.InboxExpired {
			t.Fatalf("expired entry %+v %v", got, err)
		}
		if _, err := b.Process(ctx, gw, "inbox_c", "p"); !errors.Is(err, lifecycle.ErrTerminalState) {
			t.Fatalf("processing an expired entry: %v", err)
		}
		if _, err := b.Submit(ctx, gw, sub("inbox_c")); !errors.Is(err, lifecycle.ErrInboxEntryExists) {
			t.Fatalf("resubmitting an expired id: %v", err)
		}
		if l := list(t, b, inbox.ListOptions{}); fmt.Sprint(l) != "[inbox_a:processed inbox_b:rejected]" {
			t.Fatalf("default list %v", l)
		}
		if l := list(t, b, inbox.ListOptions{Status: lifecycle.InboxExpired}); len(l) != 2 {
			t.Fatalf("expired list %v", l)
		}
		if l := list(t, b, inbox.ListOptions{IncludeExpired: true}); len(l) != 4 {
			t.Fatalf("full list %v", l)
		}
		if l := list(t, b, inbox.ListOptions{Status: lifecycle.InboxProcessed}); fmt.Sprint(l) != "[inbox_a:processed]" {
			t.Fatalf("processed list %v", l)
		}
		st, err := b.Stats(ctx)
		if err != nil || st != (lifecycle.InboxStats{Processed: 1, Rejected: 1, Expired: 2, Total: 4}) {
			t.Fatalf("stats %+v %v", st, err)
		}
		// The audit log has every write: 4 creations, process, reject, 2 expiries.
		n := 0
		for ev, err := range records.ReadAuditDay(ctx, s, t0) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.EntryID == "" {
				t.Fatalf("audit %+v", ev)
			}
			n++
		}
		for ev, err := range records.ReadAuditDay(ctx, s, clk.Now()) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Actor != "system" || ev.To != "expired" {
				t.Fatalf("audit %+v", ev)
			}
			n++
		}
		if n != 8 {
			t.Fatalf("%d audit events", n)
		}
	})
}

// TestExpiryFinishesAHalfDoneMove: an entry marked expired in inbox/ (a
// crash before it moved) is moved by the next run, and listed meanwhile.
func TestExpiryFinishesAHalfDoneMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := env.Cases()[0].New(t)
	clk := clock.NewFake(t0)
	b := newBox(t, s, clk)
	if _, err := b.Submit(ctx, lifecycle.ActorGateway, sub("inbox_x")); err != nil {
		t.Fatal(err)
	}
	raw, _, _ := s.Get(ctx, "inbox/inbox_x.json")
	half := strings.Replace(string(raw), `"status":"pending"`, `"status":"expired"`, 1)
	if _, err := s.Put(ctx, "inbox/inbox_x.json", []byte(half), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if l := list(t, b, inbox.ListOptions{IncludeExpired: true}); fmt.Sprint(l) != "[inbox_x:expired]" {
		t.Fatalf("list during the move %v", l)
	}
	if l := list(t, b, inbox.ListOptions{}); len(l) != 0 {
		t.Fatalf("default list during the move %v", l)
	}
	moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem)
	if err != nil || fmt.Sprint(moved) != "[inbox_x]" {
		t.Fatalf("moved %v %v", moved, err)
	}
	if k := keys(t, s, "inbox/"); fmt.Sprint(k) != "[inbox/expired/inbox_x.json]" {
		t.Fatalf("keys %v", k)
	}
}

func TestCustomTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	b, err := inbox.New(inbox.Config{Store: env.Cases()[0].New(t), Clock: clk, DefaultTTL: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := b.Submit(ctx, lifecycle.ActorGateway, sub("inbox_d"))
	s1 := sub("inbox_1h")
	s1.Metadata.TTLHours = 1
	if _, err := b.Submit(ctx, lifecycle.ActorGateway, s1); err != nil {
		t.Fatal(err)
	}
	if e.Metadata.TTLHours != 2 {
		t.Fatalf("default of 90 min gives ttl_hours %d", e.Metadata.TTLHours)
	}
	clk.Advance(time.Hour)
	if moved, _ := b.ExpireDue(ctx, lifecycle.ActorSystem); fmt.Sprint(moved) != "[inbox_1h]" {
		t.Fatalf("after 1h moved %v", moved)
	}
}

func TestRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, actor := range authority.Actors() {
		s := env.Cases()[0].New(t)
		b := newBox(t, s, clock.NewFake(t0))
		_, err := b.Submit(ctx, actor, sub("inbox_1"))
		if (actor == lifecycle.ActorGateway) != (err == nil) {
			t.Errorf("Submit by %s: %v", actor, err)
		}
		if err != nil {
			var coded interface{ Code() string }
			if !errors.Is(err, lifecycle.ErrForbiddenActor) || !errors.As(err, &coded) || coded.Code() != "FORBIDDEN" {
				t.Errorf("Submit by %s: %v is not FORBIDDEN", actor, err)
			}
			if k := keys(t, s, ""); len(k) != 0 {
				t.Errorf("refused Submit wrote %v", k)
			}
			continue
		}
		before := keys(t, s, "")
		for _, other := range authority.Actors() {
			if other != lifecycle.ActorGateway {
				_, perr := b.Process(ctx, other, "inbox_1", "p-1")
				_, rerr := b.Reject(ctx, other, "inbox_1", "no")
				if !errors.Is(perr, lifecycle.ErrForbiddenActor) || !errors.Is(rerr, lifecycle.ErrForbiddenActor) {
					t.Errorf("Process/Reject by %s: %v / %v", other, perr, rerr)
				}
			}
			if other != lifecycle.ActorSystem {
				if _, xerr := b.ExpireDue(ctx, other); !errors.Is(xerr, lifecycle.ErrForbiddenActor) {
					t.Errorf("ExpireDue by %s: %v", other, xerr)
				}
			}
		}
		if after := keys(t, s, ""); len(after) != len(before) {
			t.Errorf("refusals wrote: %v → %v", before, after)
		}
		if got, _ := b.Get(ctx, "inbox_1"); got.Status != lifecycle.InboxPending {
			t.Errorf("after refusals: %+v", got)
		}
		if got, err := b.Process(ctx, lifecycle.ActorGateway, "inbox_1", "p-1"); err != nil || got.Status != lifecycle.InboxProcessed {
			t.Errorf("the gateway's Process: %+v %v", got, err)
		}
	}
}

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		mod   func(*lifecycle.InboxSubmission)
	}{
		{"id", func(s *lifecycle.InboxSubmission) { s.ID = "../etc" }},
		{"source.type", func(s *lifecycle.InboxSubmission) { s.Source.Type = "email" }},
		{"source.identity", func(s *lifecycle.InboxSubmission) { s.Source.Identity = "" }},
		{"source.identity", func(s *lifecycle.InboxSubmission) { s.Source.Identity = "a\nb" }},
		{"intent.action", func(s *lifecycle.InboxSubmission) { s.Intent.Action = "Propose Edit" }},
		{"intent.action", func(s *lifecycle.InboxSubmission) { s.Intent.Action = "" }},
		{"intent.target", func(s *lifecycle.InboxSubmission) { s.Intent.Target = "" }},
		{"intent.target", func(s *lifecycle.InboxSubmission) { s.Intent.Target = strings.Repeat("x", codes.MaxRefBytes+1) }},
		{"metadata.priority", func(s *lifecycle.InboxSubmission) { s.Metadata.Priority = "urgent" }},
		{"metadata.ttl_hours", func(s *lifecycle.InboxSubmission) { s.Metadata.TTLHours = -1 }},
		{"metadata.ttl_hours", func(s *lifecycle.InboxSubmission) { s.Metadata.TTLHours = inbox.MaxTTLHours + 1 }},
		{"metadata.correlation_id", func(s *lifecycle.InboxSubmission) { s.Metadata.CorrelationID = "\x00" }},
	}
	for _, tt := range tests {
		s := env.Cases()[0].New(t)
		b := newBox(t, s, clock.NewFake(t0))
		in := sub("inbox_v")
		tt.mod(&in)
		_, err := b.Submit(context.Background(), lifecycle.ActorGateway, in)
		var ve *inbox.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, inbox.ErrInvalidEntry) {
			t.Errorf("%s: got %v", tt.field, err)
		}
		if k := keys(t, s, ""); len(k) != 0 {
			t.Errorf("%s: invalid submission wrote %v", tt.field, k)
		}
	}
	// Outcome fields are validated too.
	s := env.Cases()[0].New(t)
	b := newBox(t, s, clock.NewFake(t0))
	if _, err := b.Submit(context.Background(), lifecycle.ActorGateway, sub("inbox_o")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Process(context.Background(), lifecycle.ActorGateway, "inbox_o", "a/b"); !errors.Is(err, inbox.ErrInvalidEntry) {
		t.Errorf("bad proposal id: %v", err)
	}
	if _, err := b.Reject(context.Background(), lifecycle.ActorGateway, "inbox_o", ""); !errors.Is(err, inbox.ErrInvalidEntry) {
		t.Errorf("empty reason: %v", err)
	}
	if _, err := b.Process(context.Background(), lifecycle.ActorGateway, "missing", "p"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("missing entry: %v", err)
	}
	for _, err := range b.List(context.Background(), inbox.ListOptions{Status: "archived"}) {
		if !errors.Is(err, inbox.ErrInvalidEntry) {
			t.Errorf("bad status filter: %v", err)
		}
	}
}

func TestDecodeSubmission(t *testing.T) {
	t.Parallel()
	ok := `{"source":{"type":"telegram","identity":"guest:zone_abc"},"intent":{"action":"propose-summary","target":"notes/x"},"metadata":{"priority":"high","ttl_hours":24}}`
	s, err := inbox.DecodeSubmission([]byte(ok))
	if err != nil || s.Metadata.TTLHours != 24 || s.Source.Type != "telegram" {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{``, `{`, `{"status":"processed"}`, ok + `{}`, `{"source":{"type":"ui"}}`} {
		if _, err := inbox.DecodeSubmission([]byte(bad)); !errors.Is(err, inbox.ErrInvalidEntry) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// FuzzDecodeSubmission: decoding never panics; what it accepts passes
// Submit on a fresh box.
func FuzzDecodeSubmission(f *testing.F) {
	f.Add([]byte(`{"id":"inbox_1","source":{"type":"ui","identity":"owner"},"intent":{"action":"propose-edit","target":"notes/a"},"metadata":{"priority":"normal","ttl_hours":72}}`))
	f.Add([]byte(`{"source":{"type":"agent","identity":"agent:x"},"intent":{"action":"a","target":"t"},"metadata":{"priority":"","ttl_hours":0}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := inbox.DecodeSubmission(data)
		if err != nil {
			if !errors.Is(err, inbox.ErrInvalidEntry) {
				t.Fatalf("error %v does not match ErrInvalidEntry", err)
			}
			return
		}
		b := newBox(t, env.Cases()[0].New(t), clock.NewFake(t0))
		if _, err := b.Submit(context.Background(), lifecycle.ActorGateway, s); err != nil {
			t.Fatalf("decoded submission refused by Submit: %v", err)
		}
	})
}

// A poison entry (undecodable bytes at inbox/{id}.json) stopped the whole
// expiry pass and every listing with its decode error; it is quarantined
// and the rest goes on.
func TestPoisonEntryIsQuarantined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	b := newBox(t, s, clk)
	for _, id := range []string{"a-entry", "c-entry"} {
		if _, err := b.Submit(ctx, lifecycle.ActorGateway, sub(id)); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := layout.InboxKey("b-entry")
	if _, err := s.Put(ctx, key, []byte("{junk"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if got := list(t, b, inbox.ListOptions{}); strings.Join(got, " ") != "a-entry:pending c-entry:pending" {
		t.Fatalf("list past a poison entry: %v", got)
	}
	clk.Advance(1000 * time.Hour)
	moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem)
	if err != nil || len(moved) != 2 {
		t.Fatalf("ExpireDue past a poison entry: %v, %v", moved, err)
	}
	n := 0
	for q, err := range records.ListQuarantine(ctx, s) {
		if err != nil || q.Key != key || string(q.Data) != "{junk" {
			t.Fatalf("quarantine holds %+v, %v", q, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d quarantined, want 1", n)
	}
}
