package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// TestErrorCodes: every inbox error has a code of lifecycle's one table and
// the HTTP status that goes with it, and keeps matching its sentinels.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	b := newBox(t, memstore.New(), clk)
	gw := lifecycle.ActorGateway
	for _, id := range []string{"inbox_rejected", "inbox_expired"} {
		if _, err := b.Submit(ctx, gw, sub(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Reject(ctx, gw, "inbox_rejected", "no"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(72 * time.Hour)
	if moved, err := b.ExpireDue(ctx, lifecycle.ActorSystem); err != nil || len(moved) != 1 {
		t.Fatalf("expire: %v %v", moved, err)
	}
	badType := sub("inbox_new")
	badType.Source.Type = "email"
	tests := []struct {
		name string
		call func() error
		is   error
		code string
		http int
	}{
		{"id in use", func() error { _, err := b.Submit(ctx, gw, sub("inbox_rejected")); return err },
			lifecycle.ErrInboxEntryExists, codes.InboxEntryExists, 409},
		{"id of an expired entry", func() error { _, err := b.Submit(ctx, gw, sub("inbox_expired")); return err },
			lifecycle.ErrInboxEntryExists, codes.InboxEntryExists, 409},
		{"missing entry", func() error { _, err := b.Process(ctx, gw, "inbox_missing", "p"); return err },
			storage.ErrNotFound, codes.NotFound, 404},
		{"get missing", func() error { _, err := b.Get(ctx, "inbox_missing"); return err },
			storage.ErrNotFound, codes.NotFound, 404},
		{"process a rejected entry", func() error { _, err := b.Process(ctx, gw, "inbox_rejected", "p"); return err },
			lifecycle.ErrTerminalState, codes.InboxInvalidTransition, 409},
		{"process an expired entry", func() error { _, err := b.Process(ctx, gw, "inbox_expired", "p"); return err },
			lifecycle.ErrTerminalState, codes.InboxEntryExpired, 410},
		{"reject an expired entry", func() error { _, err := b.Reject(ctx, gw, "inbox_expired", "late"); return err },
			lifecycle.ErrInvalidTransition, codes.InboxEntryExpired, 410},
		{"bad source type", func() error { _, err := b.Submit(ctx, gw, badType); return err },
			inbox.ErrInvalidEntry, codes.InvalidRequest, 400},
		{"bad proposal id", func() error { _, err := b.Process(ctx, gw, "inbox_rejected", "a/b"); return err },
			inbox.ErrInvalidEntry, codes.InvalidRequest, 400},
		{"bad entry id", func() error { _, err := b.Get(ctx, "../x"); return err },
			nil, codes.InvalidInput, 400},
		{"refused actor", func() error { _, err := b.Submit(ctx, lifecycle.ActorMastra, sub("inbox_new")); return err },
			lifecycle.ErrForbiddenActor, codes.Forbidden, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			code := lifecycle.ErrorCode(err)
			if code != tt.code || codes.HTTPStatus(code) != tt.http {
				t.Errorf("code %s (%d), want %s (%d): %v", code, codes.HTTPStatus(code), tt.code, tt.http, err)
			}
		})
	}
	var ite *lifecycle.InvalidTransitionError
	if _, err := b.Process(ctx, gw, "inbox_expired", "p"); !errors.As(err, &ite) || ite.From != "expired" {
		t.Errorf("the machine's error is still there: %v", err)
	}
}

// TestTextLimits: the inbox's text fields go through lifecycle's one check,
// with its limits, and a refusal writes nothing.
func TestTextLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	b := newBox(t, s, clock.NewFake(t0))
	gw := lifecycle.ActorGateway
	if _, err := b.Submit(ctx, gw, sub("inbox_p")); err != nil {
		t.Fatal(err)
	}
	inputs := []struct {
		field string
		limit int
		call  func(v string) error
	}{
		{"source.identity", codes.MaxNameBytes, func(v string) error {
			in := sub("inbox_n")
			in.Source.Identity = v
			_, err := b.Submit(ctx, gw, in)
			return err
		}},
		{"intent.target", codes.MaxRefBytes, func(v string) error {
			in := sub("inbox_n")
			in.Intent.Target = v
			_, err := b.Submit(ctx, gw, in)
			return err
		}},
		{"metadata.correlation_id", codes.MaxNameBytes, func(v string) error {
			in := sub("inbox_n")
			in.Metadata.CorrelationID = v
			_, err := b.Submit(ctx, gw, in)
			return err
		}},
		{"rejection_reason", codes.MaxTextBytes, func(v string) error {
			_, err := b.Reject(ctx, gw, "inbox_p", v)
			return err
		}},
	}
	bad := []struct{ name, value, code string }{
		{"oversized", "", codes.InputTooLarge},
		{"invalid UTF-8", "ok\xff\xfe", codes.InvalidInput},
		{"NUL", "ok\x00ok", codes.InvalidInput},
	}
	for _, in := range inputs {
		for _, bv := range bad {
			t.Run(in.field+"/"+bv.name, func(t *testing.T) {
				v := bv.value
				if v == "" {
					v = strings.Repeat("x", in.limit+1)
				}
				before := teststores.Snapshot(t, s)
				err := in.call(v)
				var ve *inbox.ValidationError
				var ie *lifecycle.InputError
				if !errors.As(err, &ve) || ve.Field != in.field || !errors.Is(err, inbox.ErrInvalidEntry) ||
					!errors.As(err, &ie) || ie.Limit != in.limit {
					t.Errorf("err = %.300v, want a ValidationError of %s with an *InputError", err, in.field)
				}
				if got := lifecycle.ErrorCode(err); got != bv.code {
					t.Errorf("code %s, want %s", got, bv.code)
				}
				teststores.Unchanged(t, s, before)
			})
		}
	}
	// The fields of a fixed set refuse invalid UTF-8 as text, INVALID_INPUT,
	// not as an unknown value (issue 18: one code for undecodable bytes).
	for _, f := range []struct {
		field string
		set   func(*lifecycle.InboxSubmission)
	}{
		{"source.type", func(in *lifecycle.InboxSubmission) { in.Source.Type = "ui\xff" }},
		{"intent.action", func(in *lifecycle.InboxSubmission) { in.Intent.Action = "\xc3\x28" }},
		{"metadata.priority", func(in *lifecycle.InboxSubmission) { in.Metadata.Priority = "high\xfe" }},
	} {
		t.Run(f.field+"/invalid UTF-8", func(t *testing.T) {
			in := sub("inbox_n")
			f.set(&in)
			before := teststores.Snapshot(t, s)
			_, err := b.Submit(ctx, gw, in)
			var ve *inbox.ValidationError
			var ie *lifecycle.InputError
			if !errors.As(err, &ve) || ve.Field != f.field || !errors.As(err, &ie) {
				t.Errorf("err = %.300v, want a ValidationError of %s with an *InputError", err, f.field)
			}
			if got := lifecycle.ErrorCode(err); got != codes.InvalidInput {
				t.Errorf("code %s, want %s", got, codes.InvalidInput)
			}
			teststores.Unchanged(t, s, before)
		})
	}
	// A rejection reason may span lines, as every reason of the SDK.
	if e, err := b.Reject(ctx, gw, "inbox_p", "first line\nsecond line"); err != nil || e.Status != lifecycle.InboxRejected {
		t.Fatalf("multi-line reason: %+v %v", e, err)
	}
}
