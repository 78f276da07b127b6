package s3store_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// One MinIO process and one bucket for the whole package: starting MinIO
// costs seconds. Each test gets its own key prefix.
var (
	server     miniotest.Shared
	bucketOnce sync.Once
	bucket     string
	bucketErr  error
	// transport is shared by all clients so that TestMain can close its
	// idle connections before goleak looks for leftover goroutines.
	transport = &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}
)

type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	transport.CloseIdleConnections()
	if err := server.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the MinIO cluster:", err)
		code = 1
	}
	return code
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(runner{m}) }

// env returns the shared server and bucket, skipping or failing tb as
// miniotest.Require says when there is no MinIO binary.
func env(tb testing.TB) (*miniotest.Server, string) {
	tb.Helper()
	srv := server.Get(tb)
	bucketOnce.Do(func() { bucket, bucketErr = srv.CreateBucket(context.Background()) })
	if bucketErr != nil {
		tb.Fatalf("creating bucket: %v", bucketErr)
	}
	return srv, bucket
}

func randomPrefix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "t-" + hex.EncodeToString(b) + "/"
}

func newClient(srv *miniotest.Server, rt http.RoundTripper) *s3.Client {
	if rt == nil {
		rt = transport
	}
	return srv.Client(&http.Client{Transport: rt})
}

func newStore(tb testing.TB) *s3Store {
	tb.Helper()
	srv, bkt := env(tb)
	s, err := openWithClient(newClient(srv, nil), bkt, randomPrefix())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	// S3 versions are ETags, the MD5 of the body, and a conditional Delete
	// on MinIO is a HEAD, then a DELETE: see the package doc.
	storetest.TestDriver(t, func(t *testing.T) driver.Store { return newStore(t).d }, storetest.Capabilities{ContentVersions: true, NonAtomicConditionalDelete: true})

}

// TestNew builds the store the way a Worker does, from a Config.
func TestNew(t *testing.T) {
	srv, bkt := env(t)
	s, err := openStore(t.Context(), s3store.Config{
		Bucket:          bkt,
		Prefix:          randomPrefix(),
		Endpoint:        srv.Endpoint,
		Region:          srv.Region,
		UsePathStyle:    true,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
		HTTPClient:      &http.Client{Transport: transport},
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Put(t.Context(), "k", []byte("v"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	b, got, err := s.Get(t.Context(), "k")
	if err != nil || string(b) != "v" || got != v {
		t.Fatalf("Get = %q %q %v, want v at %q", b, got, err, v)
	}
}

// TestConfigFromEnv: the standard AWS variables plus CONVEYOR_S3_* are
// enough to reach MinIO.
func TestConfigFromEnv(t *testing.T) {
	srv, bkt := env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv(s3store.EnvBucket, bkt)
	t.Setenv(s3store.EnvPrefix, randomPrefix())
	cfg, err := s3store.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.UsePathStyle {
		t.Fatal("a custom endpoint should default to path style")
	}
	cfg.HTTPClient = &http.Client{Transport: transport}
	s, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "from-env", []byte("ok"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	t.Setenv(s3store.EnvBucket, "")
	if _, err := s3store.ConfigFromEnv(); err == nil {
		t.Fatal("ConfigFromEnv without a bucket succeeded")
	}
}

// TestNativeErrorReachable: the SDK's error stays reachable under the
// sentinel.
func TestNativeErrorReachable(t *testing.T) {
	s := newStore(t)
	_, _, err := s.Get(t.Context(), "missing")
	var apiErr smithy.APIError
	var respErr *awshttp.ResponseError
	if !errors.Is(err, storage.ErrNotFound) || !errors.As(err, &apiErr) || !errors.As(err, &respErr) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound wrapping the SDK's API error", err)
	}
	if apiErr.ErrorCode() != "NoSuchKey" || respErr.HTTPStatusCode() != http.StatusNotFound {
		t.Fatalf("native error = %s / %d", apiErr.ErrorCode(), respErr.HTTPStatusCode())
	}
	_, err = s.Put(t.Context(), "missing", []byte("x"), storage.IfMatch("0123"))
	if !errors.Is(err, storage.ErrPreconditionFailed) || !errors.As(err, &respErr) || respErr.HTTPStatusCode() != http.StatusNotFound {
		t.Fatalf("Put IfMatch on a missing key = %v, want ErrPreconditionFailed wrapping the 404", err)
	}
}

// TestForeignObject: an object written by another tool (no header) is read
// whole and can be replaced with compare-and-swap.
func TestForeignObject(t *testing.T) {
	srv, bkt := env(t)
	prefix := randomPrefix()
	client := newClient(srv, nil)
	s, err := openWithClient(client, bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte(`{"status":"queued"}`)
	if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &bkt, Key: aws.String(prefix + "foreign.json"), Body: bytes.NewReader(raw)}); err != nil {
		t.Fatal(err)
	}
	b, v, err := s.Get(t.Context(), "foreign.json")
	if err != nil || !bytes.Equal(b, raw) {
		t.Fatalf("Get = %q, %v; want %q", b, err, raw)
	}
	if _, err := s.Put(t.Context(), "foreign.json", []byte("next"), storage.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "foreign.json", []byte("again"), storage.IfMatch(v)); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("Put IfMatch(the foreign object's replaced ETag) = %v, want ErrPreconditionFailed", err)
	}
}

// TestObjectIsTheValue: the object the adapter writes is exactly the value
// (what jq or mc cat read); the write token is metadata, not body.
func TestObjectIsTheValue(t *testing.T) {
	srv, bkt := env(t)
	prefix := randomPrefix()
	client := newClient(srv, nil)
	s, err := openWithClient(client, bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for i, value := range [][]byte{
		[]byte(`{"run_id":"r1","status":"running"}`),
		nil,
		[]byte("cnv1 0123456789abcdef0123456789abcdef\nlooks like the old header"),
		bytes.Repeat([]byte{0, 0xff}, 1<<10),
	} {
		key := fmt.Sprintf("agents/a/runs/r%d/status.json", i)
		v, err := s.Put(t.Context(), key, value, storage.IfNotExists())
		if err != nil {
			t.Fatal(err)
		}
		out, err := client.GetObject(t.Context(), &s3.GetObjectInput{Bucket: &bkt, Key: aws.String(prefix + key)})
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(body, value) {
			t.Fatalf("raw object = %q, %v; want exactly %q", body, err, value)
		}
		if tok := out.Metadata["conveyor-token"]; len(tok) != 32 {
			t.Fatalf("write token in metadata = %q, want 32 hex digits", tok)
		}
		if b, got, err := s.Get(t.Context(), key); err != nil || !bytes.Equal(b, value) || got != v {
			t.Fatalf("Get = %q %q %v; want %q at %q", b, got, err, value, v)
		}
	}
}

// TestPinnedMinIOBehaviour pins the two facts of the pinned MinIO that the
// adapter's design rests on (see the package doc). If one fails, MinIO
// changed: revisit the rule it names in docs/design.md#the-store-contract.
func TestPinnedMinIOBehaviour(t *testing.T) {
	srv, bkt := env(t)
	prefix := randomPrefix()
	client := newClient(srv, nil)
	put := func(key, body, token string) string {
		t.Helper()
		out, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &bkt, Key: aws.String(prefix + key),
			Body: strings.NewReader(body), Metadata: map[string]string{"conveyor-token": token}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.ETag)
	}
	t.Run("ETag is the MD5 of the body alone", func(t *testing.T) {
		first, again, other := put("etag", "same", "token-1"), put("etag", "same", "token-2"), put("etag-2", "same", "")
		sum := md5.Sum([]byte("same"))
		if md5hex := `"` + hex.EncodeToString(sum[:]) + `"`; first != md5hex || first != again || first != other {
			t.Fatalf("ETags of identical bodies = %s, %s, %s; MinIO now gives per-write ETags: "+
				"versions could be unique per write without ContentVersions", first, again, other)
		}
	})
	t.Run("DeleteObject ignores If-Match", func(t *testing.T) {
		put("del", "v", "")
		_, err := client.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: &bkt, Key: aws.String(prefix + "del"),
			IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)})
		_, herr := client.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: &bkt, Key: aws.String(prefix + "del")})
		if err != nil || herr == nil {
			t.Fatalf("DeleteObject with a wrong If-Match = %v, object still there: %v; MinIO now honours If-Match "+
				"on DeleteObject: make Delete one conditional request and drop the HEAD", err, herr == nil)
		}
	})
}

// headHook runs after each HEAD the adapter makes, before its next request.
type headHook struct {
	base  http.RoundTripper
	after func()
}

func (h *headHook) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.base.RoundTrip(req)
	if req.Method == http.MethodHead && h.after != nil {
		h.after()
	}
	return resp, err
}

// TestConditionalDeleteOnMinIO: Delete IfMatch refuses a stale version it
// can see, but is not atomic on MinIO: a write landing between its HEAD and
// its DELETE is deleted, as the storage.Store contract warns. If this
// starts failing because the write survives, MinIO honours If-Match on
// DeleteObject (the adapter sends it): update the contract.
func TestConditionalDeleteOnMinIO(t *testing.T) {
	srv, bkt := env(t)
	prefix := randomPrefix()
	other, err := openWithClient(newClient(srv, nil), bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	hook := &headHook{base: transport}
	s, err := openWithClient(newClient(srv, hook), bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := s.Put(t.Context(), "k", []byte("v1"), storage.IfNotExists())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(t.Context(), "k", []byte("v2"), storage.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "k", storage.IfMatch(v1)); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("Delete IfMatch(stale) = %v, want ErrPreconditionFailed", err)
	}
	_, v2, err := s.Get(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	hook.after = func() {
		hook.after = nil
		if _, err := other.Put(context.Background(), "k", []byte("v3"), storage.Condition{}); err != nil {
			t.Error(err)
		}
	}
	if err := s.Delete(t.Context(), "k", storage.IfMatch(v2)); err != nil {
		t.Fatalf("Delete IfMatch(v2) racing a write: %v", err)
	}
	if b, _, err := other.Get(t.Context(), "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("after Delete IfMatch(v2) raced by a write of v3: Get = %q, %v; MinIO kept the write, "+
			"so it honours If-Match on DeleteObject now: make the Delete contract atomic on MinIO", b, err)
	}
}

// dropFirstResponse lets the first conditional PUT reach MinIO, throws its
// response away and reports a connection reset, which the SDK retries: the
// lost-response trap, for real.
type dropFirstResponse struct {
	base http.RoundTripper
	// afterDrop, if set, runs after the first response was thrown away and
	// before the SDK retries: another writer's chance to interfere.
	afterDrop func()
	// keep, if set, disables dropping: the transport only counts.
	keep bool

	mu       sync.Mutex
	dropped  bool
	statuses []int // status of every conditional PUT MinIO answered
	heads    int
}

func (d *dropFirstResponse) RoundTrip(req *http.Request) (*http.Response, error) {
	conditional := req.Method == http.MethodPut && (req.Header.Get("If-Match") != "" || req.Header.Get("If-None-Match") != "")
	resp, err := d.base.RoundTrip(req)
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.Method == http.MethodHead {
		d.heads++
	}
	if err != nil || !conditional {
		return resp, err
	}
	d.statuses = append(d.statuses, resp.StatusCode)
	if d.dropped || d.keep {
		return resp, nil
	}
	d.dropped = true
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if d.afterDrop != nil {
		d.afterDrop()
	}
	return nil, errors.New("read tcp 127.0.0.1: connection reset by peer")
}

func TestLostResponseOfConditionalPut(t *testing.T) {
	srv, bkt := env(t)
	for _, tc := range []struct {
		name string
		cond func(s *s3Store, key string) storage.Condition
	}{
		{"if-not-exists", func(*s3Store, string) storage.Condition { return storage.IfNotExists() }},
		{"if-match", func(s *s3Store, key string) storage.Condition {
			v, err := s.Put(t.Context(), key, []byte("before"), storage.Condition{})
			if err != nil {
				t.Fatal(err)
			}
			return storage.IfMatch(v)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &dropFirstResponse{base: transport}
			s, err := openWithClient(newClient(srv, rt), bkt, randomPrefix())
			if err != nil {
				t.Fatal(err)
			}
			cond := tc.cond(s, "k")
			v, err := s.Put(t.Context(), "k", []byte("mine"), cond)
			if err != nil {
				t.Fatalf("Put whose first response was lost: %v (MinIO answered %v)", err, rt.statuses)
			}
			// The trap must really have been sprung: first attempt landed,
			// the SDK's retry got 412.
			if fmt.Sprint(rt.statuses) != "[200 412]" {
				t.Fatalf("conditional PUT statuses = %v, want [200 412]", rt.statuses)
			}
			b, got, err := s.Get(t.Context(), "k")
			if err != nil || string(b) != "mine" || got != v {
				t.Fatalf("Get = %q %q %v, want mine at %q", b, got, err, v)
			}
		})
	}
}

// TestLostResponseThenOverwritten: when the first attempt landed and was
// replaced before the retry, the adapter cannot know whether its write
// happened, and says so instead of claiming a conflict or a success.
func TestLostResponseThenOverwritten(t *testing.T) {
	srv, bkt := env(t)
	prefix := randomPrefix()
	other, err := openWithClient(newClient(srv, nil), bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	rt := &dropFirstResponse{base: transport}
	rt.afterDrop = func() {
		if _, err := other.Put(context.Background(), "k", []byte("theirs"), storage.Condition{}); err != nil {
			t.Error(err)
		}
	}
	s, err := openWithClient(newClient(srv, rt), bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(t.Context(), "k", []byte("mine"), storage.IfNotExists())
	if !errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("Put = %v (statuses %v), want ErrOutcomeUnknown only", err, rt.statuses)
	}
	if fmt.Sprint(rt.statuses) != "[200 412]" {
		t.Fatalf("conditional PUT statuses = %v, want [200 412]", rt.statuses)
	}
}

// TestConflictAfterRetryIsStillConflict: the read-back must not turn a real
// conflict into a success, and a conflict on the first attempt needs no
// read-back at all.
func TestConflictAfterRetryIsStillConflict(t *testing.T) {
	srv, bkt := env(t)
	rt := &dropFirstResponse{base: transport, keep: true}
	s, err := openWithClient(newClient(srv, rt), bkt, randomPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "k", []byte("theirs"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(t.Context(), "k", []byte("mine"), storage.IfNotExists())
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("second create = %v, want ErrPreconditionFailed", err)
	}
	if b, _, _ := s.Get(t.Context(), "k"); string(b) != "theirs" {
		t.Fatalf("value = %q, want theirs", b)
	}
	if rt.heads != 0 || fmt.Sprint(rt.statuses) != "[200 412]" {
		t.Fatalf("%d HEADs, statuses %v; want 0 HEADs, [200 412]", rt.heads, rt.statuses)
	}
}

func TestPrefixValidation(t *testing.T) {
	for _, p := range []string{"noslash", "/abs/", "a/../", "a//"} {
		if _, err := openWithClient(s3.New(s3.Options{}), "b", p); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
	if _, err := openWithClient(s3.New(s3.Options{}), "", ""); err == nil {
		t.Error("empty bucket accepted")
	}
	if _, err := openWithClient(s3.New(s3.Options{}), "b", "conveyor/prod/"); err != nil {
		t.Error(err)
	}
}

// TestListSkipsForeignNames: objects whose names are not valid keys (a
// console's "dir/" marker) do not break List.
func TestListSkipsForeignNames(t *testing.T) {
	srv, bkt := env(t)
	prefix := randomPrefix()
	client := newClient(srv, nil)
	s, err := openWithClient(client, bkt, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"dir/", "dir/a", "dir/.cnvlock", "dir/b/"} {
		if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &bkt, Key: aws.String(prefix + k), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for k, err := range s.List(t.Context(), "dir/") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	if fmt.Sprint(got) != "[dir/a]" {
		t.Fatalf("List = %q, want [dir/a]", got)
	}
}

// TestMissingBucket: a missing bucket is an error of its own, never
// ErrNotFound or ErrPreconditionFailed, which callers would act on.
func TestMissingBucket(t *testing.T) {
	srv, _ := env(t)
	s, err := openWithClient(newClient(srv, nil), "no-such-bucket-conveyor", "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Get(t.Context(), "k")
	if err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get on a missing bucket = %v", err)
	}
	_, err = s.Put(t.Context(), "k", []byte("v"), storage.IfMatch("abc"))
	if err == nil || errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("Put IfMatch on a missing bucket = %v", err)
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "NoSuchBucket" {
		t.Fatalf("native error = %v", err)
	}
}

// TestCheck: Check passes on a bucket that exists and says in one
// sentence that a missing one does not, or that the server is down.
func TestCheck(t *testing.T) {
	srv, bkt := env(t)
	tests := []struct {
		name, bucket, endpoint, want string
	}{
		{name: "exists", bucket: bkt},
		{name: "missing", bucket: "no-such-bucket-conveyor", want: `bucket "no-such-bucket-conveyor" does not exist`},
		{name: "down", bucket: bkt, endpoint: "http://127.0.0.1:1", want: "cannot be reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := s3store.Config{Bucket: tt.bucket, Endpoint: srv.Endpoint, UsePathStyle: true,
				AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, Region: "us-east-1", MaxAttempts: 1}
			if tt.endpoint != "" {
				cfg.Endpoint = tt.endpoint
			}
			s, err := openStore(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Check(t.Context())
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// stallingTransport holds every request until its context ends, as a hung
// server would.
type stallingTransport struct{}

func (stallingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// TestContextEndsInFlight: a call already on the wire returns when its
// context ends, with an error matching the context's.
func TestContextEndsInFlight(t *testing.T) {
	srv, bkt := env(t)
	s, err := openWithClient(newClient(srv, stallingTransport{}), bkt, randomPrefix())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.Put(ctx, "k", []byte("v"), storage.IfNotExists()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put = %v, want DeadlineExceeded", err)
	}
	ctx2, cancel2 := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel2)
	if _, _, err := s.Get(ctx2, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v, want Canceled", err)
	}
	var listErr error
	ctx3, cancel3 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel3()
	for _, err := range s.List(ctx3, "") {
		listErr = err
	}
	if !errors.Is(listErr, context.DeadlineExceeded) {
		t.Fatalf("List = %v, want DeadlineExceeded", listErr)
	}
}
