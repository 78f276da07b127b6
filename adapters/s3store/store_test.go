package s3store_test

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/storage"
)

// s3Store is the portable Store over an s3store Driver, with the
// driver's own calls (Check, Client, Settle) at hand.
type s3Store struct {
	*storage.Store
	d *s3store.Driver
}

func (s *s3Store) Check(ctx context.Context) error { return s.d.Check(ctx) }
func (s *s3Store) Client() *s3.Client              { return s.d.Client() }

// openStore is s3store.New, keeping the driver.
func openStore(ctx context.Context, cfg s3store.Config) (*s3Store, error) {
	d, err := s3store.NewDriver(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &s3Store{Store: storage.New(d), d: d}, nil
}

// openWithClient is s3store.NewWithClient, keeping the driver.
func openWithClient(client *s3.Client, bucket, prefix string) (*s3Store, error) {
	d, err := s3store.NewDriverWithClient(client, bucket, prefix)
	if err != nil {
		return nil, err
	}
	return &s3Store{Store: storage.New(d), d: d}, nil
}
