// Package s3store is a storage.Store on Amazon S3 or an S3-compatible
// server such as MinIO, through github.com/aws/aws-sdk-go-v2/service/s3.
//
// Conditional writes use S3's own preconditions: create-only is
// PutObject with If-None-Match: *, compare-and-swap is PutObject with
// If-Match: <etag>. The store's Version is the object's ETag.
//
// # The traps of S3 conditional writes, and how this package meets them
//
// Identical bodies, identical ETags. An object's body is exactly the value
// (jq, mc cat and any S3 client read it as it is), and a single-part ETag
// is the MD5 of the body, so writing A, then B, then A again brings back
// the first ETag: versions are content-addressed. No header-free S3
// mechanism gives a per-write ETag or a condition on anything but the ETag
// (metadata does not change the ETag; MinIO's random ETags need SSE or
// --no-compat, AWS has neither), so this adapter gives the weaker guarantee
// storage.Version describes: equal versions only for equal bytes. A
// compare-and-swap that succeeds after A-B-A acts on the bytes it was
// computed from; callers that must notice every write change the bytes on
// every write (typed documents carry a counter). Its conformance run
// declares Capabilities.ContentVersions (package storage/storetest).
//
// Lost responses. When the response to a conditional PutObject is lost, the
// SDK retries, and the retry can answer 412 because the first attempt
// landed. The adapter counts the SDK's attempts: a 412 on the first attempt
// is a plain conflict. After a retry, it HEADs the object; each write
// carries a random token as object metadata (x-amz-meta-conveyor-token, not
// in the body), and if the token there is its own, the write landed and Put
// reports success with that ETag. If it is not, the first attempt may have
// landed and been replaced since, or never landed: Put cannot tell, and
// returns an error matching storage.ErrOutcomeUnknown (not
// ErrPreconditionFailed, which would invite a retry that applies a change
// twice).
//
// If-Match on a missing key answers 404, not 412. Put and Delete map it to
// ErrPreconditionFailed, as the storage.Store contract requires.
//
// Conditional Delete is not atomic on MinIO. DeleteObject sends If-Match,
// which AWS S3 honours atomically; MinIO (as of the pinned release) ignores
// it and deletes whatever is there. The adapter therefore HEADs first and
// refuses a stale version itself: correct against a sequential writer,
// atomic against concurrent writers on AWS S3 only. On MinIO a write that
// lands between the HEAD and the DELETE is deleted, so nothing may rely on
// a conditional Delete for mutual exclusion (see storage.Store's Delete);
// its conformance run declares storetest.Capabilities.NonAtomicConditionalDelete (on
// MinIO, 33 of 40 rounds of a Delete racing a swap of one version saw both
// win).
//
// Objects written by other tools are values like any other: read whole,
// with their ETag as version.
//
// # Servers that stop, stall or restart
//
// A stopping MinIO node drops the requests it holds with 499
// ClientDisconnected, and a connection can be reset after a write was
// carried out. Both are retried (the SDK's retry list lacks 499). A
// conditional write none of whose attempts got an answer is read back by
// its token, as a lost response is; if the token is not there, the error
// matches storage.ErrOutcomeUnknown and is transient (storage.Transient),
// so a patient caller retries it, and a retry that then meets a broken
// condition is an unknown outcome too, never a conflict.
//
// A write is not cut by its caller: once an attempt of a PutObject or
// DeleteObject is sent, it runs to its answer (within the attempt timeout)
// even if the caller's context ends meanwhile, and Put or Delete returns
// that answer; no attempt is sent once the context has ended. MinIO (as of
// the pinned release) can lose an object whose conditional overwrite the
// client cuts mid-request: the key then reads 404 on every node, for as
// long as it was watched (90 s, a restarted node back among them).
//
// New takes several endpoints of one cluster (Config.Endpoints) and fails
// over between them through the SDK's own hooks: an endpoint resolver
// picks, for every attempt, the next endpoint that is up; a middleware
// inside the retry loop bounds each attempt (Config.AttemptTimeout) and
// skips an endpoint that failed for a while; the retryer retries at once
// while another endpoint is up. A Store made by NewWithClient has none of
// this: its client is the caller's.
//
// On a MinIO cluster the store may answer wrongly for a while after a
// disturbance; Settle (driver.Settler) says how long (Config.Settle).
package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// metaToken is the user metadata key of the write token
// (x-amz-meta-conveyor-token on the wire).
const metaToken = "conveyor-token"

// Config configures New. Only Bucket is required; every empty field falls
// back to the AWS SDK's default chain (AWS_* environment variables, shared
// config files, instance roles).
type Config struct {
	// Bucket holds the objects. Required.
	Bucket string
	// Prefix is prepended to every key, e.g. "conveyor/" to share a bucket.
	// Empty means none; otherwise it must end in "/" and be at most 128
	// bytes (S3 keys hold 1024, and the store's keys up to 896 of them).
	Prefix string
	// Endpoint is the S3 API URL, e.g. "http://127.0.0.1:9000" for MinIO,
	// or several, comma-separated (as Endpoints). Empty, with Endpoints
	// empty too: the SDK's default (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,
	// or the AWS endpoint of Region).
	Endpoint string
	// Endpoints are more URLs of the same server: the nodes of one MinIO
	// cluster. Each request goes to the next endpoint that is up, in turn;
	// an attempt that gets no answer, a 5xx or a 499 is retried at once on
	// another one, and its endpoint is skipped for EndpointCooldown, after
	// which a request tries it again. Endpoint, if set, comes first.
	Endpoints []string
	// EndpointCooldown is how long an endpoint that failed is skipped.
	// 0 means 5 s.
	EndpointCooldown time.Duration
	// AttemptTimeout bounds one attempt of a request, from its start to
	// the response's headers (a value's upload included; a body being read
	// is not cut): a node that
	// stalls (MinIO holds a write up to 30 s on a lock held through a dead
	// node) costs one attempt, retried on another endpoint. A conditional
	// write whose attempt timed out may still land: it is resolved as a
	// lost response (see the package doc). 0 means 10 s; negative, none.
	// A write's attempt, once sent, is not cut when the caller's context
	// ends, only by this timeout (10 s when none): Put and Delete can return that much after the context's
	// deadline, with the write's answer.
	AttemptTimeout time.Duration
	// Settle is how long the store may answer wrongly after a node
	// restarts or a writer dies mid-request (storage.Store.SettleTime): read as
	// the engines' wait before they believe a key is missing. 0 means
	// automatic: 40 s on a MinIO cluster (several
	// endpoints, or Check finds an erasure set that needs more than one
	// drive to write), else 0 (a single-drive server, AWS S3). Negative
	// means 0 whatever the server.
	Settle time.Duration
	// Logger receives a WARN when an endpoint is skipped and an INFO when
	// it answers again. Nil discards.
	Logger *slog.Logger
	// Region to sign for. Empty: AWS_REGION or the shared config; if those
	// are empty too, "us-east-1" (which MinIO accepts).
	Region string
	// UsePathStyle addresses buckets as <endpoint>/<bucket>/<key>, which
	// MinIO needs. Default false (virtual-hosted style, as on AWS).
	UsePathStyle bool
	// AccessKeyID and SecretAccessKey (and SessionToken, optional) are
	// static credentials. Empty: the SDK's default credential chain.
	AccessKeyID, SecretAccessKey, SessionToken string
	// MaxAttempts bounds the SDK's attempts per call, first included.
	// 0 means 3, or one more than the endpoints when there are more.
	MaxAttempts int
	// HTTPClient carries the requests. Nil means the SDK's default client.
	HTTPClient *http.Client
	// CheckWait is how long Check waits for a server that cannot be
	// reached yet (started with the program, or restarting), asking again
	// every second. 0 means none: Check asks once.
	CheckWait time.Duration
}

// Environment variables ConfigFromEnv reads, besides the AWS SDK's own.
const (
	envBucket    = "CONVEYOR_S3_BUCKET"
	envPrefix    = "CONVEYOR_S3_PREFIX"
	envPathStyle = "CONVEYOR_S3_PATH_STYLE"
	// envEndpoints is a comma-separated list of endpoints (Config.Endpoints).
	envEndpoints = "CONVEYOR_S3_ENDPOINTS"
)

// ConfigFromEnv builds a Config from CONVEYOR_S3_BUCKET (required),
// CONVEYOR_S3_PREFIX, CONVEYOR_S3_ENDPOINTS (a comma-separated list of the
// nodes of one cluster) and CONVEYOR_S3_PATH_STYLE ("true"/"false"; default
// true when CONVEYOR_S3_ENDPOINTS, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL
// is set, since a custom endpoint is usually MinIO). Without
// CONVEYOR_S3_ENDPOINTS, the endpoint, and always the region and
// credentials, come from the standard AWS variables
// (AWS_ENDPOINT_URL[_S3], AWS_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...) through the SDK's default chain
// when New loads the config.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Bucket: os.Getenv(envBucket), Prefix: os.Getenv(envPrefix)}
	if v := os.Getenv(envEndpoints); v != "" {
		cfg.Endpoints = strings.Split(v, ",")
	}
	cfg.UsePathStyle = len(cfg.Endpoints) > 0 || os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	if v := os.Getenv(envPathStyle); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("s3store: %s=%q: %w", envPathStyle, v, err)
		}
		cfg.UsePathStyle = b
	}
	// The rest is read even without a bucket, for a caller that names
	// the bucket itself (a flag).
	if cfg.Bucket == "" {
		return cfg, fmt.Errorf("s3store: %s is not set", envBucket)
	}
	return cfg, nil
}

// maxPrefixLen is the longest Config.Prefix: S3 keys hold 1024 bytes and
// storekey.MaxKeyLen of them belong to the store's keys.
const maxPrefixLen = 1024 - storekey.MaxKeyLen

// Driver is the driver (package storage/driver) under the Store New
// returns, on one S3 bucket (and optional key prefix): what a program takes
// from NewDriver to reach Check, Client and Settle, and tests to wrap.
type Driver struct {
	client *s3.Client
	bucket string
	prefix string
	pool   *pool // nil: one endpoint, the SDK's

	settleCfg time.Duration
	settle    atomic.Int64 // Settle(), in nanoseconds
	checkWait time.Duration
}

var (
	_ driver.Store             = (*Driver)(nil)
	_ driver.AtomicityReporter = (*Driver)(nil)
)

// New builds an S3 client from cfg (see Config for defaults) and returns a
// Store on it. It does not contact the server.
func New(ctx context.Context, cfg Config) (*storage.Store, error) {
	d, err := NewDriver(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return storage.New(d), nil
}

// NewDriver is New's driver, for a program that also calls Check or reads
// Settle (storage.New makes the Store over it).
func NewDriver(ctx context.Context, cfg Config) (*Driver, error) {
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKeyID != "" || cfg.SecretAccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	// MinIO and many S3-compatible servers reject or mis-handle the SDK's
	// default CRC checksums; compute them only when the API requires one.
	opts = append(opts,
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3store: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	urls, err := parseEndpoints(cfg.Endpoint, cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	var p *pool
	if len(urls) > 0 {
		p = newPool(urls, orDefault(cfg.EndpointCooldown, defaultEndpointCooldown), cfg.Logger)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if p != nil {
			o.BaseEndpoint = aws.String(urls[0])
			o.EndpointResolverV2 = &resolver{pool: p, inner: s3.NewDefaultEndpointResolverV2()}
		}
		o.UsePathStyle = cfg.UsePathStyle
		if cfg.HTTPClient != nil {
			// Set here, not through config.WithHTTPClient, so that
			// AWS_CA_BUNDLE handling never needs to modify the caller's client.
			o.HTTPClient = cfg.HTTPClient
		}
		o.Retryer = newRetryer(maxAttempts(cfg.MaxAttempts, len(urls)), p)
		g := &guard{pool: p, timeout: orDefault(cfg.AttemptTimeout, defaultAttemptTimeout)}
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Insert(g, "Retry", middleware.After)
		})
	})
	if p == nil {
		// The SDK's endpoint, from AWS_ENDPOINT_URL[_S3] or the shared
		// config: one without a scheme would fail every request with an
		// error that names no cause.
		if e := aws.ToString(client.Options().BaseEndpoint); e != "" {
			if err := checkURL(e, "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL"); err != nil {
				return nil, err
			}
		}
	}
	s, err := newDriverWithClient(client, cfg.Bucket, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	s.pool = p
	s.settleCfg, s.checkWait = cfg.Settle, cfg.CheckWait
	if cfg.Settle > 0 || (cfg.Settle == 0 && len(urls) > 1) {
		s.settle.Store(int64(orDefault(cfg.Settle, defaultClusterSettle)))
	}
	return s, nil
}

// orDefault is d when v is 0, none when v is negative, else v.
func orDefault(v, d time.Duration) time.Duration {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}

func maxAttempts(configured, endpoints int) int {
	if configured > 0 {
		return configured
	}
	return max(3, endpoints+1)
}

// NewWithClient returns a Store on a caller-built client, for callers who
// configure the SDK themselves. prefix is as in Config.Prefix.
func NewWithClient(client *s3.Client, bucket, prefix string) (*storage.Store, error) {
	d, err := newDriverWithClient(client, bucket, prefix)
	if err != nil {
		return nil, err
	}
	return storage.New(d), nil
}

// newDriverWithClient is NewWithClient's driver.
func newDriverWithClient(client *s3.Client, bucket, prefix string) (*Driver, error) {
	if bucket == "" {
		return nil, errors.New("s3store: no bucket")
	}
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			return nil, fmt.Errorf("s3store: prefix %q must end in /", prefix)
		}
		if err := storekey.ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return nil, fmt.Errorf("s3store: prefix: %w", err)
		}
		if len(prefix) > maxPrefixLen {
			return nil, fmt.Errorf("s3store: prefix %q longer than %d bytes", prefix, maxPrefixLen)
		}
	}
	return &Driver{client: client, bucket: bucket, prefix: prefix}, nil
}

// Check asks the server for the bucket (one HEAD request) so a program can
// refuse to start on a bucket that does not exist or cannot be reached,
// with one sentence that says which, instead of failing on every later
// call. It is the only call of the Store that is about the bucket rather
// than a key.
//
// On a MinIO server given by endpoint, Check also asks its cluster health
// check whether it is a cluster, which sets Settle when Config.Settle is 0.
// With Config.CheckWait, a server that cannot be reached is asked again
// every second within that time, and the error of the last ask returned.
func (s *Driver) Check(ctx context.Context) error {
	if s.checkWait <= 0 {
		return s.check(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, s.checkWait)
	defer cancel()
	err := s.check(ctx)
	for errors.Is(err, ErrUnreachable) {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = s.check(ctx)
	}
	return err
}

// check is one ask of Check.
func (s *Driver) check(ctx context.Context) error {
	if err := s.checkCredentials(ctx); err != nil {
		return err
	}
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	switch {
	case err == nil:
		s.detectCluster(ctx)
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("s3store: bucket %q: no answer: %w: %w", s.bucket, ErrUnreachable, err)
	}
	switch httpStatus(err) {
	case http.StatusNotFound:
		return fmt.Errorf("s3store: bucket %q does not exist (create it, or name another with -s3-bucket / %s): %w: %w", s.bucket, envBucket, ErrNoBucket, err)
	case http.StatusForbidden:
		return fmt.Errorf("s3store: bucket %q: access denied to these credentials: %w", s.bucket, err)
	}
	if endpointFailure(err) {
		return fmt.Errorf("s3store: bucket %q: %w: %w", s.bucket, ErrUnreachable, err)
	}
	if !validBucketName(s.bucket) {
		// Asked only once the server refused (MinIO and AWS answer 400
		// Bad Request, naming no cause): a bucket named before the rule
		// (AWS's us-east-1 allowed more) still works.
		return fmt.Errorf("s3store: bucket name %q is not valid: %s: %w", s.bucket, bucketNameRule, err)
	}
	return fmt.Errorf("s3store: bucket %q: %w", s.bucket, err)
}

// CreateBucket creates the bucket (in the client's region) for a program
// that offers to, as Check's error on a missing one suggests; a bucket
// that already exists and is the caller's is no error. A name that breaks
// S3's rule is refused before any request.
func (s *Driver) CreateBucket(ctx context.Context) error {
	if !validBucketName(s.bucket) {
		return fmt.Errorf("s3store: bucket name %q is not valid: %s", s.bucket, bucketNameRule)
	}
	if err := s.checkCredentials(ctx); err != nil {
		return err
	}
	in := &s3.CreateBucketInput{Bucket: &s.bucket}
	if r := s.client.Options().Region; r != "" && r != "us-east-1" {
		// Outside us-east-1, AWS wants the region named again.
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(r)}
	}
	_, err := s.client.CreateBucket(ctx, in)
	switch code := apiCode(err); {
	case err == nil, code == "BucketAlreadyOwnedByYou":
		return nil
	case code == "BucketAlreadyExists":
		return fmt.Errorf("s3store: bucket %q belongs to another account (bucket names are global on AWS): choose another name: %w", s.bucket, err)
	case httpStatus(err) == http.StatusForbidden:
		return fmt.Errorf("s3store: bucket %q: these credentials may not create buckets: %w", s.bucket, err)
	case ctx.Err() == nil && endpointFailure(err):
		return fmt.Errorf("s3store: bucket %q: %w: %w", s.bucket, ErrUnreachable, err)
	}
	return fmt.Errorf("s3store: create bucket %q: %w", s.bucket, err)
}

// checkCredentials fetches the credentials requests are signed with, so
// that none found is said as such: the SDK's default chain ends asking the
// EC2 instance metadata service, which off EC2 does not answer, and that
// failure would otherwise read as the S3 server not answering.
func (s *Driver) checkCredentials(ctx context.Context) error {
	p := s.client.Options().Credentials
	if p == nil || aws.IsCredentialsProvider(p, aws.AnonymousCredentials{}) {
		return nil
	}
	if _, err := p.Retrieve(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("s3store: %w: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (on MinIO: its root user and password, or an access key made on it), or AWS_PROFILE: %w", ErrNoCredentials, err)
	}
	return nil
}

// ErrNoCredentials is matched by Check's error when no credentials were
// found to sign requests with.
var ErrNoCredentials = errors.New("no AWS credentials found")

// ErrNoBucket is matched by Check's error when the bucket does not exist.
var ErrNoBucket = errors.New("no such bucket")

// bucketNameRule is S3's rule for bucket names, briefly.
const bucketNameRule = "S3 bucket names are 3 to 63 characters of lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit, and not an IP address"

// validBucketName reports whether name keeps S3's rule for new buckets:
// 3 to 63 characters of lowercase letters, digits, dots and hyphens,
// beginning and ending with a letter or digit, no two dots together, and
// not shaped as an IPv4 address.
func validBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 || strings.Contains(name, "..") || net.ParseIP(name) != nil {
		return false
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(name)-1 || (c != '.' && c != '-')) {
			return false
		}
	}
	return true
}

// ErrUnreachable is matched by Check's error when no endpoint answered
// (refused, timed out, or a 5xx or 499 as a starting or stopping server
// answers): worth waiting for, unlike a missing bucket.
var ErrUnreachable = errors.New("the server cannot be reached")

// Client is the underlying S3 client.
func (s *Driver) Client() *s3.Client { return s.client }

func (s *Driver) objectKey(key string) *string { return aws.String(s.prefix + key) }

// httpStatus is the HTTP status of an SDK error, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// noSuchKey reports whether err is a 404 about the object, not the bucket:
// a missing bucket is a configuration error, never ErrNotFound.
func noSuchKey(err error) bool {
	return httpStatus(err) == http.StatusNotFound && apiCode(err) != "NoSuchBucket"
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// fail wraps an SDK error: a done context is reported as such, anything else
// keeps the SDK error as the cause.
func fail(ctx context.Context, op, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &storage.OpError{Op: op, Key: key, Kind: ctxErr, Cause: err}
	}
	return &storage.OpError{Op: op, Key: key, Cause: err}
}

func unquote(etag *string) storage.Version {
	return storage.Version(strings.Trim(aws.ToString(etag), `"`))
}

func quote(v storage.Version) *string { return aws.String(`"` + string(v) + `"`) }

// Get implements driver.Store. Given several endpoints (a cluster), a
// not-found is asked again of one other endpoint before it is believed: a
// node short of its read quorum (just restarted, or beside a killed one)
// answers 404 for keys that exist, and another node usually has them. One
// more GET, not one per node, because every create on a cluster reads its
// key first and usually finds it missing.
func (s *Driver) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	asks, gctx, as := 1, ctx, (*asked)(nil)
	if s.pool != nil && len(s.pool.eps) > 1 {
		as = &asked{done: map[*endpoint]bool{}}
		asks, gctx = 2, context.WithValue(ctx, askedKey{}, as)
	}
	var out *s3.GetObjectOutput
	var err error
	for range asks {
		out, err = s.client.GetObject(gctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: s.objectKey(key)})
		if err == nil || !noSuchKey(err) || as == nil {
			break
		}
		as.answeredNotFound()
	}
	if err != nil {
		if noSuchKey(err) {
			return nil, "", &storage.OpError{Op: "get", Key: key, Kind: storage.ErrNotFound, Cause: err}
		}
		return nil, "", fail(ctx, "get", key, err)
	}
	defer out.Body.Close()
	var buf []byte
	if n := aws.ToInt64(out.ContentLength); n > 0 {
		buf = make([]byte, 0, n)
	}
	b := bytes.NewBuffer(buf)
	if _, err := io.Copy(b, out.Body); err != nil {
		return nil, "", fail(ctx, "get", key, err)
	}
	return b.Bytes(), unquote(out.ETag), nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return hex.EncodeToString(b[:])
}

// Put implements driver.Store.
func (s *Driver) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	token := newToken()
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           s.objectKey(key),
		Body:          bytes.NewReader(value), // seekable: the SDK signs and retries it without a copy
		ContentLength: aws.Int64(int64(len(value))),
		Metadata:      map[string]string{metaToken: token},
	}
	switch cond.Kind() {
	case driver.CreateOnly:
		in.IfNoneMatch = aws.String("*")
	case driver.MatchVersion:
		in.IfMatch = quote(cond.Version())
	}
	var call callState
	var optFns []func(*s3.Options)
	if cond.Kind() != driver.Unconditional {
		optFns = append(optFns, call.option)
	}
	out, err := s.client.PutObject(ctx, in, optFns...)
	if err == nil {
		return unquote(out.ETag), nil
	}
	conflict := isConditionFailure(err, cond)
	switch {
	case conflict && call.n.Load() <= 1:
		return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrPreconditionFailed, Cause: err}
	case !conflict && !call.ambiguous.Load():
		return "", fail(ctx, "put", key, err)
	}
	// The condition failed on an SDK retry, perhaps because an earlier
	// attempt landed, or an attempt got no answer (a reset, a timeout, a
	// 499 from a stopping node): read the token back before calling it a
	// conflict or a failure.
	if ctx.Err() != nil {
		return "", &storage.OpError{Op: "put", Key: key, Kind: ctx.Err(), Cause: &unknownOutcome{err: err}}
	}
	var headOpts []func(*s3.Options)
	if !conflict {
		// No answer: the key may be locked by a dead node (see
		// Config.AttemptTimeout), and the read-back would wait as long as
		// the write. One attempt says what it can.
		headOpts = append(headOpts, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	}
	v, ok, herr := s.landed(ctx, key, token, headOpts...)
	switch {
	case ok:
		return v, nil
	case conflict && herr == nil:
		return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: err}
	case conflict:
		return "", &storage.OpError{Op: "put", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: errors.Join(err, herr)}
	}
	// No answer, and the token is not (yet) there: the write may land
	// later or never. Retried as such by a patient caller.
	if herr != nil {
		err = errors.Join(err, herr)
	}
	return "", &storage.OpError{Op: "put", Key: key, Cause: &unknownOutcome{err: err}}
}

// isConditionFailure reports whether err says a precondition did not hold:
// 412, 404 for If-Match on a missing key, or AWS's 409
// ConditionalRequestConflict for a concurrent conditional write.
func isConditionFailure(err error, cond storage.Condition) bool {
	if cond.Kind() == driver.Unconditional {
		return false
	}
	switch httpStatus(err) {
	case http.StatusPreconditionFailed:
		return true
	case http.StatusNotFound:
		return cond.Kind() == driver.MatchVersion && noSuchKey(err)
	case http.StatusConflict:
		return apiCode(err) == "ConditionalRequestConflict"
	}
	return false
}

// landed reports whether the object now at key carries token, i.e. our write
// is the current one, and its version.
func (s *Driver) landed(ctx context.Context, key, token string, optFns ...func(*s3.Options)) (storage.Version, bool, error) {
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: s.objectKey(key)}, optFns...)
	if err != nil {
		if noSuchKey(err) {
			return "", false, nil
		}
		return "", false, err
	}
	if head.Metadata[metaToken] != token {
		return "", false, nil
	}
	return unquote(head.ETag), true, nil
}

// AtomicConditionalDelete implements driver.AtomicityReporter: false, since
// on MinIO an IfMatch Delete checks the version with a HEAD and then
// deletes (see Delete); AWS S3 would be atomic, but the driver cannot tell
// the two apart.
func (s *Driver) AtomicConditionalDelete() bool { return false }

// Delete implements driver.Store.
func (s *Driver) Delete(ctx context.Context, key string, cond storage.Condition) error {
	in := &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.objectKey(key)}
	if cond.Kind() == driver.MatchVersion {
		// MinIO ignores If-Match on DeleteObject: check it ourselves first
		// (see the package comment), and still send it for AWS S3.
		head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: in.Key})
		if err != nil {
			if noSuchKey(err) {
				return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrPreconditionFailed, Cause: err}
			}
			return fail(ctx, "delete", key, err)
		}
		if unquote(head.ETag) != cond.Version() {
			return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrPreconditionFailed}
		}
		in.IfMatch = quote(cond.Version())
	}
	if _, err := s.client.DeleteObject(ctx, in); err != nil {
		if isConditionFailure(err, cond) {
			return &storage.OpError{Op: "delete", Key: key, Kind: storage.ErrPreconditionFailed, Cause: err}
		}
		return fail(ctx, "delete", key, err)
	}
	return nil
}

// ListAfter implements driver.Store with ListObjectsV2, page after page,
// from StartAfter (after under the store's prefix), so S3 skips what sorts
// before the cursor: one request per page yielded. S3 returns keys in
// UTF-8 byte order, which is the contract's order. Objects whose names are
// not valid keys (written by other tools, e.g. "dir/" markers) are skipped.
func (s *Driver) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		in := &s3.ListObjectsV2Input{
			Bucket: &s.bucket,
			Prefix: aws.String(s.prefix + prefix),
		}
		if after != "" {
			in.StartAfter = aws.String(s.prefix + after)
		}
		p := s3.NewListObjectsV2Paginator(s.client, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield("", fail(ctx, "list", prefix, err))
				return
			}
			for _, obj := range page.Contents {
				key := strings.TrimPrefix(aws.ToString(obj.Key), s.prefix)
				if storekey.ValidateKey(key) != nil {
					continue
				}
				if !yield(key, nil) {
					return
				}
			}
		}
	}
}
