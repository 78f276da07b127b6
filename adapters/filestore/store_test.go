//go:build unix

package filestore_test

import (
	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// fsStore is the portable Store over a filestore driver, with the
// driver's directory at hand.
type fsStore struct {
	*storage.Store
	d driver.Store
}

// Root is the directory the store lives in.
func (s *fsStore) Root() string { return filestore.RootForTest(s.d) }

// openStore opens the store at dir as filestore.New does, keeping its
// driver.
func openStore(dir string, opts ...filestore.Option) (*fsStore, error) {
	d, err := filestore.NewDriver(dir, opts...)
	if err != nil {
		return nil, err
	}
	return &fsStore{Store: storage.New(d), d: d}, nil
}
