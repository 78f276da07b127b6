//go:build unix && !linux

package filestore

import (
	"context"
	"errors"

	"github.com/runconveyor/conveyor/storage"
)

// Watch implements storage.Watcher where it can: on Linux, with inotify.
// Here it fails with an error matching errors.ErrUnsupported, and callers
// poll.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := storage.CheckWatch(ctx, prefix); err != nil {
		return nil, err
	}
	return nil, storage.NewOpError("watch", prefix, nil, errors.ErrUnsupported)
}
