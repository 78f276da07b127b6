package storage_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"syscall"
	"testing"

	"github.com/runconveyor/conveyor/storage"
)

type httpErr int

func (e httpErr) Error() string       { return "http error" }
func (e httpErr) HTTPStatusCode() int { return int(e) }

func TestTransient(t *testing.T) {
	t.Parallel()
	op := func(cause error) error { return &storage.OpError{Op: "put", Key: "k", Cause: cause} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused connection", op(syscall.ECONNREFUSED), true},
		{"i/o error", op(syscall.EIO), true},
		{"connection cut", op(io.ErrUnexpectedEOF), true},
		{"HTTP 503", op(httpErr(503)), true},
		{"HTTP 500", op(httpErr(500)), true},
		{"HTTP 429", op(httpErr(429)), true},
		{"HTTP 499 ClientDisconnected (a stopping MinIO node)", op(httpErr(499)), true},
		{"HTTP 403 AccessDenied", op(httpErr(403)), false},
		{"HTTP 404 NoSuchBucket", op(httpErr(404)), false},
		{"HTTP 400", op(httpErr(400)), false},
		{"no HTTP answer (the AWS SDK's status 0 on a refused connection)", op(httpErr(0)), true},
		{"permission denied", op(fs.ErrPermission), false},
		{"read-only file system", op(syscall.EROFS), false},
		{"name too long", op(syscall.ENAMETOOLONG), false},
		{"invalid key", storage.CheckKeyForTest("put", "../x"), false},
		{"context canceled", op(context.Canceled), false},
		{"not found", &storage.OpError{Op: "get", Key: "k", Kind: storage.ErrNotFound}, false},
		{"precondition failed", &storage.OpError{Op: "put", Key: "k", Kind: storage.ErrPreconditionFailed}, false},
		{"already waited out", &storage.UnavailableError{Op: "get", Key: "k", Err: op(syscall.ECONNREFUSED)}, false},
		{"not a store error", errors.New("boom"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := storage.Transient(tt.err); got != tt.want {
			t.Errorf("Transient(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
