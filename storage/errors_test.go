package storage_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/runconveyor/conveyor/storage"
)

func TestOpError(t *testing.T) {
	t.Parallel()
	native := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	err := error(&storage.OpError{Op: "get", Key: "a/b", Kind: storage.ErrNotFound, Cause: native})
	var pe *fs.PathError
	var oe *storage.OpError
	if !errors.Is(err, storage.ErrNotFound) || !errors.As(err, &pe) || !errors.As(err, &oe) || oe.Key != "a/b" {
		t.Fatalf("OpError does not unwrap to both the sentinel and the native error: %v", err)
	}
	if errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatal("OpError matches a sentinel it does not carry")
	}
	if got, want := err.Error(), "storage: get a/b: not found: open /x: file does not exist"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	ctxErr := &storage.OpError{Op: "put", Key: "k", Kind: context.Canceled}
	if !errors.Is(ctxErr, context.Canceled) || ctxErr.Error() != "storage: put k: context canceled" {
		t.Fatalf("context OpError = %v", ctxErr)
	}
}

func TestCheckCondition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op   string
		cond storage.Condition
		ok   bool
	}{
		{"put", storage.Condition{}, true},
		{"put", storage.IfNotExists(), true},
		{"put", storage.IfMatch("v1"), true},
		{"put", storage.IfMatch(""), false},
		{"delete", storage.Condition{}, true},
		{"delete", storage.IfMatch("v1"), true},
		{"delete", storage.IfNotExists(), false},
	} {
		err := storage.CheckConditionForTest(tc.op, "k", tc.cond)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, storage.ErrInvalidCondition)) {
			t.Errorf("checkCondition(%s, %s) = %v", tc.op, tc.cond, err)
		}
	}
	if s := storage.IfMatch("abc").String(); s != "if-match(abc)" {
		t.Errorf("String() = %q", s)
	}
}
