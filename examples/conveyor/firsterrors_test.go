package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestBucketCreate: bucket create makes the bucket a Worker's -s3-bucket
// names, on a real MinIO, and again is no error; a store on a bucket that
// does not exist says how to create it, and a name S3 refuses says S3's
// rule.
func TestBucketCreate(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region,
		"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	bucket := "made-" + hex.EncodeToString(b)

	code, out := runConveyor(t, env, "show", "-store", "s3://"+bucket, "-s3-endpoint", srv.Endpoint, "k")
	if want := "To create it: go run ./examples/conveyor bucket create -s3-bucket " + bucket + " -s3-endpoint " + srv.Endpoint; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("show on a missing bucket: exit %d, want 1 saying %q:\n%s", code, want, out)
	}
	for range 2 { // the second finds it there
		code, out = runConveyor(t, env, "bucket", "create", "-s3-bucket", bucket, "-s3-endpoint", srv.Endpoint)
		if code != 0 || !strings.Contains(out, "bucket "+bucket+" is ready") {
			t.Fatalf("bucket create: exit %d:\n%s", code, out)
		}
	}
	if code, out = runConveyor(t, env, "show", "-store", "s3://"+bucket, "-s3-endpoint", srv.Endpoint, ""); code != 0 {
		t.Fatalf("show on the created bucket: exit %d:\n%s", code, out)
	}
	code, out = runConveyor(t, env, "bucket", "create", "-s3-bucket", "My_Bucket", "-s3-endpoint", srv.Endpoint)
	if code != 1 || !strings.Contains(out, `bucket name "My_Bucket" is not valid: S3 bucket names are 3 to 63 characters`) {
		t.Fatalf("bucket create My_Bucket: exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"bucket"}, {"bucket", "delete"}, {"bucket", "create"}, {"bucket", "create", "-s3-bucket", "b", "x"}} {
		if code, _, errOut := storeCLI(t, args...); code != 2 || !strings.Contains(errOut, "usage: conveyor bucket create") {
			t.Errorf("%q: exit %d, %q", args, code, errOut)
		}
	}
}

// TestActorWithToken: -actor beside a token (from -token or
// $CONVEYOR_TOKEN) is refused, saying which one the Worker would use and
// how to choose, where it used to be dropped without a word; either alone
// still works.
func TestActorWithToken(t *testing.T) {
	// Not parallel: $CONVEYOR_TOKEN is read from the environment.
	url, _ := worker(t)
	t.Setenv("CONVEYOR_TOKEN", "")
	code, _, errOut := conveyor(t, url, "-token", "t0k", "-actor", "admin", "agents")
	if code != 2 || !strings.Contains(errOut, "-actor and a token (-token) together: a Worker with tokens acts as the token's actor and ignores -actor") ||
		!strings.Contains(errOut, `or drop -token to act as "admin"`) {
		t.Errorf("-token and -actor: exit %d, %q", code, errOut)
	}
	if code, _, errOut := conveyor(t, url, "-token", "t0k", "agents"); code != 0 {
		t.Errorf("-token alone: exit %d, %q", code, errOut)
	}
	if code, _, errOut := conveyor(t, url, "-actor", "admin", "agents"); code != 0 {
		t.Errorf("-actor alone: exit %d, %q", code, errOut)
	}
	t.Setenv("CONVEYOR_TOKEN", "t0k")
	code, _, errOut = conveyor(t, url, "-actor", "admin", "agents")
	if code != 2 || !strings.Contains(errOut, "($CONVEYOR_TOKEN)") || !strings.Contains(errOut, "unset CONVEYOR_TOKEN") {
		t.Errorf("$CONVEYOR_TOKEN and -actor: exit %d, %q", code, errOut)
	}
}
