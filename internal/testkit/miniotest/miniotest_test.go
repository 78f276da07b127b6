package miniotest_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServerLifecycle: a server starts live, serves a bucket, and is gone
// (process reaped, port closed, directory removed) after Stop.
func TestServerLifecycle(t *testing.T) {
	srv := miniotest.New(t)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	bucket, err := srv.CreateBucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client(&http.Client{Transport: tr}).HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("bucket %s not there: %v", bucket, err)
	}
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on 127.0.0.1", srv.Endpoint)
	}
	tr.CloseIdleConnections()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(srv.Endpoint + "/minio/health/live")
	if err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Stop")
	}
	if err := srv.Stop(); err != nil { // idempotent; t.Cleanup calls it again too
		t.Fatal(err)
	}
}

// TestFindBinary: MINIO_BIN wins and must exist; a missing one is an error
// that says how to install MinIO.
func TestFindBinary(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "minio")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MINIO_BIN", fake)
	if got, err := miniotest.FindBinary(); err != nil || got != fake {
		t.Fatalf("FindBinary = %q, %v; want %q", got, err, fake)
	}
	t.Setenv("MINIO_BIN", filepath.Join(t.TempDir(), "nope"))
	if _, err := miniotest.FindBinary(); err == nil {
		t.Fatal("a MINIO_BIN that does not exist was accepted")
	}
	t.Setenv("MINIO_BIN", "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOPATH", t.TempDir())
	_, err := miniotest.FindBinary()
	if err == nil || !strings.Contains(err.Error(), "scripts/install-tools.sh") || !strings.Contains(err.Error(), "MINIO_BIN") {
		t.Fatalf("FindBinary without a binary = %v, want the install hint", err)
	}
}

// TestStartFailsForBrokenBinary: a binary that exits at once is reported
// with an error, not a hang.
func TestStartFailsForBrokenBinary(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "minio")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := miniotest.Start(t.Context(), fake, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Start of a broken binary = %v, want an error with its output", err)
	}
	var exitErr interface{ ExitCode() int }
	if !errors.As(err, &exitErr) && !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("error does not carry the exit status: %v", err)
	}
}
