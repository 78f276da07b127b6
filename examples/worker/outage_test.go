package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/lifecycle/codes"
	"github.com/runconveyor/conveyor/lifecycle/run"
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
		res, err := c.Submit(ctx, run.SubmitRequest{AgentSlug: AgentResearch, IdempotencyKey: key})
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
