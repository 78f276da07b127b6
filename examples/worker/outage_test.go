package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestStoreOutage: a Worker whose only MinIO is down when it starts waits
// for it (within its 30 s start-up check) instead of exiting; when MinIO
// stops under it, it answers 502 UPSTREAM_UNAVAILABLE (never 500) and
// serves again, without a restart, once MinIO is back.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	srv := miniotest.New(t)
	bucket, err := srv.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Halt(false); err != nil {
		t.Fatal(err)
	}
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region}
	w := start(t, "worker", env, "-addr", "127.0.0.1:0", "-s3-bucket", bucket, "-s3-endpoint", srv.Endpoint,
		"-step-pause", "20ms", "-poll", "100ms", "-idle-poll", "200ms")
	time.Sleep(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	var addr string
	select {
	case addr = <-w.addr:
	case err := <-w.done:
		t.Fatalf("the Worker exited while MinIO was down at its start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the Worker did not start within 60 s")
	}
	c := &client.Client{BaseURL: "http://" + addr}
	submit := func(key string) (string, error) {
		res, err := c.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: AgentResearch, IdempotencyKey: key})
		if err != nil {
			return "", err
		}
		return res.RunID, nil
	}
	id, err := submit("api:outage:1")
	if err != nil {
		t.Fatal(err)
	}

	if err := srv.Halt(false); err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(ctx, id)
	var ae *client.Error
	if !errors.As(err, &ae) || (ae.Status != http.StatusBadGateway && ae.Status != http.StatusServiceUnavailable) ||
		(ae.Code != codes.UpstreamUnavailable && ae.Code != codes.ServiceUnavailable) {
		t.Fatalf("GET a run with MinIO down = %v, want 502/503 with the store's code", err)
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err = submit("api:outage:2"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Worker still fails 30 s after MinIO came back: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for {
		st, err := c.Status(ctx, id)
		if err == nil && st.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run submitted before the outage: %+v, %v", st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterNodeStops: a Worker given every node of a 4-node MinIO
// cluster keeps acknowledging submits promptly when the node it names
// first is killed, never with a 5xx, and every run completes.
func TestClusterNodeStops(t *testing.T) {
	gate(t, "issue 27, cluster, slow (100-190 s on a 4-node cluster): since the S3 store stopped cutting writes it had sent, no acknowledged run read 404 in 16 runs at load averages of 40-80 (2026-11-28, 8 with two CPU hogs beside it); "+
		"15 passed, one failed its 5 s bound on a submit (5.06 s) at a load average of 80. Before, a poll pass's deadline cut a run's If-Match status write and MinIO lost the object (2 of 5 runs)")
	t.Parallel()
	c := miniotest.NewCluster(t)
	bucket, err := c.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	env := []string{"AWS_ACCESS_KEY_ID=" + n.AccessKey, "AWS_SECRET_ACCESS_KEY=" + n.SecretKey, "AWS_REGION=" + n.Region}
	w := start(t, "worker", env, "-addr", "127.0.0.1:0", "-s3-bucket", bucket,
		"-s3-endpoint", strings.Join(c.Endpoints(), ","), "-step-pause", "20ms", "-poll", "100ms", "-idle-poll", "200ms")
	var addr string
	select {
	case addr = <-w.addr:
	case err := <-w.done:
		t.Fatalf("the Worker exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the Worker did not start within 60 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := &client.Client{BaseURL: "http://" + addr}
	var ids []string
	submit := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			start := time.Now()
			res, err := cl.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: AgentResearch, IdempotencyKey: fmt.Sprintf("api:cluster:%d", i)})
			if err != nil {
				t.Fatalf("submit %d: %v", i, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("submit %d took %s", i, d)
			}
			ids = append(ids, res.RunID)
		}
	}
	submit(0, 10)
	if err := c.Halt(0, true); err != nil {
		t.Fatal(err)
	}
	submit(10, 30)
	for _, id := range ids {
		// A read of a cluster with a node just killed may answer a false
		// 404 for up to the store's settle time (docs/stores.md, the fault
		// model), so a 404 of an acknowledged run is read again until then.
		var st lifecycle.RunStatus
		var err error
		var notFoundSince time.Time
		for ; ; time.Sleep(500 * time.Millisecond) {
			st, err = cl.Wait(ctx, id)
			if !isNotFound(err) {
				break
			}
			if notFoundSince.IsZero() {
				notFoundSince = time.Now()
				t.Logf("run %s read 404 on the cluster: read again within the settle time", id)
			}
			if time.Since(notFoundSince) > 40*time.Second { // s3store's settle time on a cluster
				break
			}
		}
		if err != nil || st.Status != "completed" {
			t.Fatalf("run %s: %+v, %v", id, st, err)
		}
	}
	if err := c.Resume(ctx, 0); err != nil {
		t.Fatal(err)
	}
}
