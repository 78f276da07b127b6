package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/probe"
	"github.com/runconveyor/conveyor/internal/testkit/s3proxy"
)

// startLog runs the worker program with args until it serves its API or
// exits, within a minute, and returns its output so far and whether it
// served. A serving process is stopped.
func startLog(t *testing.T, env []string, args ...string) (string, bool) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	cmd.Stdout = nil
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	served := false
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if listening.MatchString(sc.Text()) {
			served = true
			_ = cmd.Process.Kill()
			break
		}
	}
	_ = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the worker neither served nor exited within a minute:\n%s", out.String())
	}
	return out.String(), served
}

// TestRefusesAnUnsafeStore: behind a proxy that drops the conditional
// headers, MinIO accepts a create-only write over an existing key and
// stale compare-and-swaps; the Worker refuses to start on it, naming the
// failed checks, and starts with -allow-unsafe-store, logging them. On
// MinIO itself it starts, the check passed.
func TestRefusesAnUnsafeStore(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	bucket, err := srv.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proxy := s3proxy.New(t, srv)
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region}
	failed := []string{probe.CreateOverExisting, probe.StaleIfMatch, probe.IfMatchMissing}
	tests := []struct {
		name     string
		endpoint string
		flags    []string
		serves   bool
		want     []string // in the output
	}{
		{"behind the proxy", proxy.Endpoint, nil, false, append([]string{"does not keep the promises", "-allow-unsafe-store"}, failed...)},
		{"behind the proxy, overridden", proxy.Endpoint, []string{"-allow-unsafe-store"}, true, append([]string{"store_semantics_failed"}, failed...)},
		{"minio", srv.Endpoint, nil, true, []string{"store_checked"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-s3-bucket", bucket, "-s3-prefix", strings.ReplaceAll(tc.name, " ", "-") + "/",
				"-s3-endpoint", tc.endpoint, "-addr", "127.0.0.1:0", "-drain", "2s"}, tc.flags...)
			out, served := startLog(t, env, args...)
			if served != tc.serves {
				t.Fatalf("served: %v, want %v:\n%s", served, tc.serves, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output does not say %q:\n%s", w, out)
				}
			}
			if tc.name == "minio" && strings.Contains(out, "store_semantics_failed") {
				t.Errorf("MinIO failed the check:\n%s", out)
			}
		})
	}
}
