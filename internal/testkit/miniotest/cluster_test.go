package miniotest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
)

// TestCluster: four nodes start as one cluster (an object written through
// one node is read through another); with a node stopped (SIGINT) or killed
// (SIGKILL) the others still write; restarted, the node rejoins and serves
// what was written while it was down; Stop ends every process and removes
// the data.
func TestCluster(t *testing.T) {
	c := miniotest.NewCluster(t)
	eps := c.Endpoints()
	checkEndpoints(t, eps)
	ctx := t.Context()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	bkt, err := c.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A write right after a node leaves may meet 503 SlowDownWrite for a
	// moment (the cluster has not yet settled which drives are online:
	// seen in CI as "drives-online: 4" with one node of four down); the
	// claim is that the others write, so a put is retried for up to 30 s.
	put := func(node int, key string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := c.Client(node, hc).PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: &key, Body: strings.NewReader(key)})
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("put %s through node %d: %v\n%s", key, node, err, c.Logs())
			}
			t.Logf("put %s through node %d: %v; again", key, node, err)
			time.Sleep(time.Second)
		}
	}
	get := func(node int, key string) {
		t.Helper()
		out, err := c.Client(node, hc).GetObject(ctx, &s3.GetObjectInput{Bucket: &bkt, Key: &key})
		if err != nil {
			t.Fatalf("get %s through node %d: %v", key, node, err)
		}
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(b) != key {
			t.Fatalf("get %s through node %d = %q", key, node, b)
		}
	}
	put(0, "before")
	for i := range eps {
		get(i, "before")
	}
	for _, step := range []struct {
		node int
		kill bool
	}{{1, false}, {2, true}} {
		if err := c.Halt(step.node, step.kill); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Client(step.node, hc).HeadBucket(short, &s3.HeadBucketInput{Bucket: &bkt})
		cancel()
		if err == nil {
			t.Fatalf("halted node %d answered", step.node)
		}
		key := fmt.Sprintf("while-%d-down", step.node)
		other := (step.node + 1) % len(eps)
		put(other, key)
		get((other+1)%len(eps), key)
		start := time.Now()
		if err := c.Resume(ctx, step.node); err != nil {
			t.Fatalf("resume node %d: %v", step.node, err)
		}
		t.Logf("node %d (killed: %v) rejoined %v after its restart", step.node, step.kill, time.Since(start).Round(10*time.Millisecond))
		n404, took := servedWithin(t, c.Client(step.node, hc), bkt, key, time.Minute)
		t.Logf("node %d then answered 404 %d times over %v for %s, written while it was down", step.node, n404, took, key)
		get(step.node, key)
		put(step.node, key+"-after")
	}
	tr.CloseIdleConnections()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(ep + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s still answers after Stop", ep)
		}
	}
	if err := c.Stop(); err != nil { // idempotent; t.Cleanup calls it again too
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Fatalf("data directory %s still there after Stop: %v", c.Dir(), err)
	}
}

// checkEndpoints: one endpoint a node, each on its own 127.0.0.1 port.
func checkEndpoints(t *testing.T, eps []string) {
	t.Helper()
	if len(eps) != miniotest.ClusterNodes {
		t.Fatalf("%d endpoints, want %d", len(eps), miniotest.ClusterNodes)
	}
	seen := map[string]bool{}
	for _, ep := range eps {
		if !strings.HasPrefix(ep, "http://127.0.0.1:") || seen[ep] {
			t.Fatalf("endpoints %v: each node needs its own 127.0.0.1 port", eps)
		}
		seen[ep] = true
	}
}

// servedWithin reads key through client until it is found, counting the
// 404s on the way (a restarted node's false ones): the node must serve it
// within limit.
func servedWithin(t *testing.T, client *s3.Client, bkt, key string, limit time.Duration) (n404 int, took time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		_, err := client.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: &bkt, Key: &key})
		if err == nil {
			return n404, time.Since(start).Round(10 * time.Millisecond)
		}
		if apiErr, ok := errors.AsType[smithy.APIError](err); ok && (apiErr.ErrorCode() == "NotFound" || apiErr.ErrorCode() == "NoSuchKey") {
			n404++
		}
		if time.Since(start) > limit {
			t.Fatalf("%s not served within %v: %v", key, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
