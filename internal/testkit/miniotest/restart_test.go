package miniotest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
)

// TestHaltResume: a halted server refuses requests; resumed, it serves the
// same bucket and objects on the same endpoint.
func TestHaltResume(t *testing.T) {
	srv := miniotest.New(t)
	ctx := context.Background()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := srv.Client(&http.Client{Transport: tr})
	bkt, err := srv.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bkt), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Halt(false); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = c.HeadObject(short, &s3.HeadObjectInput{Bucket: aws.String(bkt), Key: aws.String("k")})
	cancel()
	if err == nil {
		t.Fatal("a halted server answered")
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bkt), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "v" {
		t.Fatalf("after resume: %q", b)
	}
}
