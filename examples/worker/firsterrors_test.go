package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestS3FirstErrors: the Worker's first run on S3 goes wrong in ways
// that each get their own sentence saying what to do, at once rather
// than after the 30 s it waits for a server that does not answer: no
// credentials (an instance metadata service that refuses, as off EC2),
// an endpoint without http://, a name S3 refuses, a missing bucket (with
// the command that creates it). Against a real MinIO.
func TestS3FirstErrors(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	bucket, err := srv.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	creds := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	hostPort := strings.TrimPrefix(srv.Endpoint, "http://")
	tests := []struct {
		name     string
		env      []string
		bucket   string
		endpoint string
		want     string
	}{
		{"no credentials", nil, bucket, srv.Endpoint, "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"endpoint without http://", creds, bucket, hostPort, `endpoint "` + hostPort + `" has no scheme: write it as http://` + hostPort},
		{"invalid bucket name", creds, "My_Bucket", srv.Endpoint, `bucket name "My_Bucket" is not valid: S3 bucket names are`},
		{"missing bucket", creds, "no-such-bucket-conveyor", srv.Endpoint,
			"To create it: go run ./examples/conveyor bucket create -s3-bucket no-such-bucket-conveyor -s3-endpoint " + srv.Endpoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second) // under the 30 s wait
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "-s3-bucket", tt.bucket, "-s3-endpoint", tt.endpoint, "-addr", "127.0.0.1:0")
			cmd.Env = []string{childEnv + "=1", "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "AWS_REGION=" + srv.Region,
				"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
				"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1"}
			cmd.Env = append(cmd.Env, tt.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("exit %v (context: %v), want a refusal to start:\n%s", err, ctx.Err(), out)
			}
			if !strings.Contains(string(out), tt.want) || strings.Contains(string(out), "cannot be reached") || listening.Match(out) {
				t.Fatalf("want it to say %q, not that the server cannot be reached, and serve no API:\n%s", tt.want, out)
			}
		})
	}
}

// TestRefusesUnrelatedFiles: a -data directory holding files that are not
// a store is refused at start, naming the directory and the files, for
// either embedded store; before, SQLite called it a directory store and
// -store files started on it.
func TestRefusesUnrelatedFiles(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "files"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			err := runWorker(ctx, []string{"-data", dir, "-store", kind, "-addr", "127.0.0.1:0", "-drain", "5s"}, io.Discard, io.Discard,
				func(string) { t.Error("the worker started"); cancel() })
			want := dir + " holds files that are not a Conveyor store (thesis.tex)"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Point -data at an empty or new directory") {
				t.Fatalf("err %v, want one saying %q and what to do", err, want)
			}
		})
	}
}
