//go:build unix && !linux

package filestore

import (
	"context"
	"errors"

	"github.com/runconveyor/conveyor/storage"
)

// Watch implements driver.Watcher where it can: on Linux, with inotify.
// Here it fails with an error matching errors.ErrUnsupported, and callers
// poll.
func (s *fileDriver) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return nil, &storage.OpError{Op: "watch", Key: prefix, Cause: errors.ErrUnsupported}
}
