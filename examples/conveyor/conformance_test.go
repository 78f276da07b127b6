package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/testkit/s3proxy"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// runConveyor runs the conveyor command as a process (the test binary in
// its child mode) and returns its exit code and output.
func runConveyor(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("conveyor %q did not end within 5 minutes:\n%s", args, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// verdicts are the checks the summary gives each result.
func verdicts(out string) map[string]string {
	v := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "PASS" || f[0] == "FAIL" || f[0] == "SKIP") && strings.HasSuffix(f[2], "s") {
			v[f[1]] = f[0]
		}
	}
	return v
}

// TestConformanceCommand runs the whole suite, concurrency checks included,
// against stores that already run: a directory and MinIO pass every check
// (Watch skipped on S3, which cannot watch, and the atomic conditional
// Delete, which MinIO does not promise); MinIO behind a proxy that drops
// the conditional headers fails the checks that rest on them, and the
// command exits 1. Each leaves nothing behind.
func TestConformanceCommand(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	bucket, err := srv.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proxy := s3proxy.New(t, srv)
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region,
		"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull}
	dir := t.TempDir()
	everyCheck := func(skipped ...string) map[string]string {
		want := map[string]string{}
		for _, c := range storetest.Checks() {
			want[c] = "PASS"
		}
		for _, c := range skipped {
			want[c] = "SKIP"
		}
		return want
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     map[string]string // verdicts that must appear
	}{
		// Neither a directory nor S3 can commit several keys at once.
		{"directory", []string{"-dir", dir}, 0, everyCheck("Commit")},
		{"minio", []string{"-s3-bucket", bucket, "-s3-endpoint", srv.Endpoint, "-s3-prefix", "plain/"}, 0,
			everyCheck("Watch", "ConditionalDeleteIsAtomic", "Commit")},
		{"headers stripped", []string{"-s3-bucket", bucket, "-s3-endpoint", proxy.Endpoint, "-s3-prefix", "stripped/"}, 1,
			map[string]string{"ReadAfterWrite": "PASS", "PutConditions": "FAIL", "CreateOnceRace": "FAIL", "CASCounterRace": "FAIL", "Linearizable": "FAIL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runConveyor(t, env, append([]string{"conformance"}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.wantCode, out)
			}
			got := verdicts(out)
			for check, want := range tc.want {
				if got[check] != want {
					t.Errorf("%s: %q, want %s", check, got[check], want)
				}
			}
			if len(got) != len(storetest.Checks()) {
				t.Errorf("%d verdicts, want one per check (%d)", len(got), len(storetest.Checks()))
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("output:\n%s", out)
			}
		})
	}
	// Nothing left: not in the directory, not in the bucket.
	if left, err := os.ReadDir(dir); err != nil || len(left) > 0 {
		t.Errorf("left in the directory: %v %v", left, err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: tr}), bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	for k, err := range s.List(t.Context(), "") {
		t.Errorf("left in the bucket: %q %v", k, err)
		if err != nil {
			break
		}
	}
}

// TestConformanceUsage: a command that names no store, or two, is a
// usage error (exit 2) that says so; -h prints the usage.
func TestConformanceUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{nil, 2, "name one store"},
		{[]string{"-dir", "x", "-s3-bucket", "b"}, 2, "name one store"},
		{[]string{"-dir", "x", "-run", "("}, 2, "-run"},
		{[]string{"-h"}, 0, "conveyor conformance (-dir DIR"},
	} {
		var out, errOut strings.Builder
		code := cli(context.Background(), append([]string{"conformance"}, tc.args...), &out, &errOut)
		if code != tc.wantCode || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("conformance %q: exit %d, %q; want exit %d saying %q", tc.args, code, errOut.String(), tc.wantCode, tc.want)
		}
	}
}
