package main

// The side prober and the conditional writer of the cluster scenario
// (cluster_test.go): they measure and provoke the store's own faults,
// apart from the Workers.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
)

// proberBody is the writer's large object, large enough that its trickled
// requests last a while; probeBody is the probed keys', small as the
// Workers' records (MinIO keeps such objects inside their metadata).
// Rewriting either with the same bytes changes nothing, so a create-only
// write wrongly accepted does no harm beyond being counted.
var (
	proberBody = bytes.Repeat([]byte("conveyor probe "), 8<<10) // 120 KiB
	probeBody  = []byte(`{"probe":true}`)
)

// prober reads keys it wrote, through every node in turn, and tries to
// create them again: a 404 for one of them is a false not-found, an
// accepted create-only write is a create over an existing key. It writes a
// new key every few rounds, so that keys written while a node is down are
// read through it once it is back.
type prober struct {
	clients []*s3.Client
	bkt     string

	mu   sync.Mutex
	keys []string

	rounds, false404, overCreate atomic.Int64
}

func newProber(ctx context.Context, c *miniotest.Cluster, bkt string, hc *http.Client) (*prober, error) {
	p := &prober{bkt: bkt}
	for i := range c.Nodes {
		p.clients = append(p.clients, c.Client(i, hc))
	}
	for i := range 8 {
		key := fmt.Sprintf("prober/base-%d", i)
		if _, err := p.clients[0].PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: &key, Body: bytes.NewReader(probeBody)}); err != nil {
			return nil, err
		}
		p.keys = append(p.keys, key)
	}
	return p, nil
}

func apiCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// run probes until ctx ends.
func (p *prober) run(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		p.rounds.Add(1)
		node := p.clients[n%len(p.clients)]
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if n%4 == 0 {
			key := fmt.Sprintf("prober/new-%d", n)
			if _, err := node.PutObject(rctx, &s3.PutObjectInput{Bucket: &p.bkt, Key: &key, Body: bytes.NewReader(probeBody), IfNoneMatch: aws.String("*")}); err == nil {
				p.mu.Lock()
				p.keys = append(p.keys, key)
				p.mu.Unlock()
			}
		}
		p.mu.Lock()
		key := p.keys[rand.IntN(8)] // a base key, which the racer rewrites
		if n%2 == 1 {
			key = p.keys[len(p.keys)-1-rand.IntN(min(len(p.keys), 12))] // a recent one
		}
		p.mu.Unlock()
		_, err := node.HeadObject(rctx, &s3.HeadObjectInput{Bucket: &p.bkt, Key: &key})
		if c := apiCode(err); c == "NotFound" || c == "NoSuchKey" {
			p.false404.Add(1)
		}
		_, err = node.PutObject(rctx, &s3.PutObjectInput{Bucket: &p.bkt, Key: &key, Body: bytes.NewReader(probeBody), IfNoneMatch: aws.String("*")})
		if err == nil {
			p.overCreate.Add(1)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Millisecond):
		}
	}
}

// race rewrites the base keys with If-Match (the same bytes), through
// every node in turn, until ctx ends: reads and create-only writes racing
// rewrites, with a node killed, are where a cluster answers wrongly
// (measured: a false 404 in about 300 reads with a node killed -9 and
// restarted meanwhile; none without the kill).
func (p *prober) race(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		c := p.clients[(n+1)%len(p.clients)]
		key := fmt.Sprintf("prober/base-%d", n%8)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if h, err := c.HeadObject(rctx, &s3.HeadObjectInput{Bucket: &p.bkt, Key: &key}); err == nil {
			_, _ = c.PutObject(rctx, &s3.PutObjectInput{Bucket: &p.bkt, Key: &key, Body: bytes.NewReader(probeBody), IfMatch: h.ETag})
		}
		cancel()
		if n%4 == 3 {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// mark is how many keys the prober has written so far.
func (p *prober) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.keys)
}

// burst reads, for d, the keys written since mark through node, and tries
// to create them again: right after a node's restart, keys written while
// it was down are where it answers wrongly.
func (p *prober) burst(ctx context.Context, node, since int, d time.Duration) {
	p.mu.Lock()
	keys := append([]string(nil), p.keys[since:]...)
	p.mu.Unlock()
	c := p.clients[node]
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		for _, key := range keys {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.HeadObject(rctx, &s3.HeadObjectInput{Bucket: &p.bkt, Key: &key})
			if code := apiCode(err); code == "NotFound" || code == "NoSuchKey" {
				p.false404.Add(1)
			}
			_, err = c.PutObject(rctx, &s3.PutObjectInput{Bucket: &p.bkt, Key: &key, Body: bytes.NewReader(probeBody), IfNoneMatch: aws.String("*")})
			if err == nil {
				p.overCreate.Add(1)
			}
			cancel()
		}
	}
}

// The conditional writer: a child process (the test binary again) that
// rewrites the prober's base keys with If-Match and tries to create them
// with If-None-Match, and rewrites a large object of its own with If-Match,
// every body trickled, so that a kill -9 lands in the middle of a request.
const (
	writerEnv       = "CONVEYOR_WORKER_TEST_WRITER"
	writerEndpoint  = "CONVEYOR_WORKER_TEST_WRITER_ENDPOINT"
	writerBucket    = "CONVEYOR_WORKER_TEST_WRITER_BUCKET"
	writerAccessKey = "CONVEYOR_WORKER_TEST_WRITER_ACCESS"
	writerSecretKey = "CONVEYOR_WORKER_TEST_WRITER_SECRET"
)

// trickle sends request bodies 8 KiB at a time, 10 ms apart.
type trickle struct{ rt http.RoundTripper }

func (t trickle) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.ContentLength > 0 {
		req.Body = &slowBody{ReadCloser: req.Body}
	}
	return t.rt.RoundTrip(req)
}

type slowBody struct{ io.ReadCloser }

func (b *slowBody) Read(p []byte) (int, error) {
	time.Sleep(10 * time.Millisecond)
	return b.ReadCloser.Read(p[:min(len(p), 8<<10)])
}

// conditionalWriter is the writer process's body: it writes until killed,
// saying "writing" on stdout after its first request.
func conditionalWriter() {
	srv := &miniotest.Server{Endpoint: os.Getenv(writerEndpoint), AccessKey: os.Getenv(writerAccessKey),
		SecretKey: os.Getenv(writerSecretKey), Region: "us-east-1"}
	bkt := os.Getenv(writerBucket)
	c := srv.Client(&http.Client{Transport: trickle{http.DefaultTransport}})
	ctx := context.Background()
	big := "writer/big"
	_, _ = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: &big, Body: bytes.NewReader(proberBody)})
	for n := 0; ; n++ {
		key := "prober/base-" + strconv.Itoa(n%8)
		head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bkt, Key: &key})
		if err == nil {
			_, _ = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: &key, Body: bytes.NewReader(probeBody), IfMatch: head.ETag})
		}
		_, _ = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: &key, Body: bytes.NewReader(probeBody), IfNoneMatch: aws.String("*")})
		if head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bkt, Key: &big}); err == nil {
			_, _ = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: &big, Body: bytes.NewReader(proberBody), IfMatch: head.ETag})
		}
		if n == 0 {
			fmt.Println("writing")
		}
	}
}

// dump logs, for a post-mortem of jobs left unfinished (stuck: "id: why"),
// every object of the bucket under queue/ and each stuck job's record, as
// the first node answers them.
func (p *prober) dump(t *testing.T, stuck []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := p.clients[0]
	var ids []string
	for _, s := range stuck {
		id, _, _ := strings.Cut(s, ":")
		ids = append(ids, id)
	}
	var tok *string
	for {
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &p.bkt, ContinuationToken: tok})
		if err != nil {
			t.Logf("dump: listing: %v", err)
			return
		}
		for _, o := range out.Contents {
			key := aws.ToString(o.Key)
			show := strings.Contains(key, "queue/")
			for _, id := range ids {
				show = show || strings.Contains(key, id)
			}
			if !show {
				continue
			}
			body := ""
			if strings.Contains(key, "jobs/") || strings.Contains(key, "queue/agents/") {
				if g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &p.bkt, Key: o.Key}); err == nil {
					b, _ := io.ReadAll(io.LimitReader(g.Body, 4096))
					g.Body.Close()
					body = string(b)
				} else {
					body = err.Error()
				}
			}
			t.Logf("dump: %s %v %s", key, aws.ToTime(o.LastModified).Format(time.RFC3339Nano), body)
		}
		if !aws.ToBool(out.IsTruncated) {
			return
		}
		tok = out.NextContinuationToken
	}
}
