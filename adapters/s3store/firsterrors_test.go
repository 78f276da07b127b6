package s3store_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/s3store"
)

// TestCheckSaysWhatToDo: each mistake a first run makes on the way to a
// bucket gets its own sentence saying what to do, against a real MinIO:
// no credentials anywhere (the SDK's chain ends at an instance metadata
// service that does not answer, as off EC2) is not "cannot be reached";
// an endpoint written without http:// says to add it, from a setting or
// the environment; a name S3 refuses says S3's rule.
func TestCheckSaysWhatToDo(t *testing.T) {
	srv, bkt := env(t)
	hostPort := strings.TrimPrefix(srv.Endpoint, "http://")
	tests := []struct {
		name     string
		env      map[string]string
		cfg      s3store.Config
		want     string
		wantIs   error
		notWants string
	}{
		{name: "no credentials", env: map[string]string{"AWS_ENDPOINT_URL": srv.Endpoint},
			want: "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", wantIs: s3store.ErrNoCredentials},
		{name: "endpoint without scheme, environment", env: map[string]string{"AWS_ENDPOINT_URL": hostPort, "AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey},
			want: `endpoint "` + hostPort + `" (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) has no scheme: write it as http://` + hostPort},
		{name: "endpoint without scheme, config", env: map[string]string{"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey},
			cfg:  s3store.Config{Endpoint: hostPort},
			want: `endpoint "` + hostPort + `" has no scheme: write it as http://` + hostPort},
		{name: "invalid bucket name", env: map[string]string{"AWS_ENDPOINT_URL": srv.Endpoint, "AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey},
			cfg:  s3store.Config{Bucket: "My_Bucket"},
			want: `bucket name "My_Bucket" is not valid: S3 bucket names are 3 to 63 characters of lowercase letters`},
		{name: "missing bucket", env: map[string]string{"AWS_ENDPOINT_URL": srv.Endpoint, "AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey},
			cfg: s3store.Config{Bucket: "no-such-bucket-conveyor"}, want: "does not exist", wantIs: s3store.ErrNoBucket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Nothing from this machine's AWS setup, and an instance
			// metadata service that refuses connections.
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
				"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_EC2_METADATA_DISABLED"} {
				t.Setenv(k, tt.env[k])
			}
			t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
			t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1")
			cfg := tt.cfg
			cfg.UsePathStyle, cfg.MaxAttempts, cfg.HTTPClient = true, 1, &http.Client{Transport: transport}
			if cfg.Bucket == "" {
				cfg.Bucket = bkt
			}
			d, err := s3store.NewDriver(t.Context(), cfg)
			if err == nil {
				err = d.Check(t.Context())
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to say %q", err, tt.want)
			}
			if errors.Is(err, s3store.ErrUnreachable) || strings.Contains(err.Error(), "cannot be reached") {
				t.Fatalf("error = %v, says the server cannot be reached", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("error = %v, want it to match %v", err, tt.wantIs)
			}
		})
	}
}

// TestCreateBucket: CreateBucket makes a bucket Check then finds, is no
// error on one the caller already has, and refuses a name S3 would,
// saying the rule, before asking.
func TestCreateBucket(t *testing.T) {
	srv, bkt := env(t)
	open := func(t *testing.T, bucket string) *s3store.Driver {
		d, err := s3store.NewDriver(t.Context(), s3store.Config{Bucket: bucket, Endpoint: srv.Endpoint, UsePathStyle: true,
			AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, Region: "us-east-1", MaxAttempts: 1, HTTPClient: &http.Client{Transport: transport}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	fresh := open(t, "created-"+strings.TrimSuffix(randomPrefix(), "/"))
	if err := fresh.Check(t.Context()); !errors.Is(err, s3store.ErrNoBucket) {
		t.Fatalf("Check before CreateBucket = %v, want ErrNoBucket", err)
	}
	if err := fresh.CreateBucket(t.Context()); err != nil {
		t.Fatalf("CreateBucket = %v", err)
	}
	if err := fresh.Check(t.Context()); err != nil {
		t.Fatalf("Check after CreateBucket = %v", err)
	}
	if err := open(t, bkt).CreateBucket(t.Context()); err != nil {
		t.Fatalf("CreateBucket of an existing bucket = %v, want nil", err)
	}
	err := open(t, "Bad_Name").CreateBucket(t.Context())
	if err == nil || !strings.Contains(err.Error(), `bucket name "Bad_Name" is not valid: S3 bucket names are`) {
		t.Fatalf("CreateBucket(Bad_Name) = %v", err)
	}
}
