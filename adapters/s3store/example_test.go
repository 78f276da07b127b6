package s3store_test

import (
	"context"
	"log"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
)

// A store on a MinIO server. Against AWS S3, leave Endpoint and
// UsePathStyle unset and let the SDK's default chain find credentials.
func ExampleNew() {
	ctx := context.Background()
	s, err := openStore(ctx, s3store.Config{
		Bucket:          "conveyor",
		Prefix:          "prod/",
		Endpoint:        "http://127.0.0.1:9000",
		UsePathStyle:    true,
		AccessKeyID:     "minioadmin",
		SecretAccessKey: "minioadmin",
	})
	if err != nil {
		log.Fatal(err)
	}
	key, _ := layout.JobKey("550e8400-e29b-41d4-a716-446655440000")
	if _, err := s.Put(ctx, key, []byte(`{"status":"QUEUED"}`), storage.IfNotExists()); err != nil {
		log.Fatal(err)
	}
}

// The same from the environment: CONVEYOR_S3_BUCKET, CONVEYOR_S3_PREFIX and
// the standard AWS_* variables (AWS_ENDPOINT_URL_S3, AWS_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...).
func ExampleConfigFromEnv() {
	ctx := context.Background()
	cfg, err := s3store.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	s, err := openStore(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	_ = s
}
