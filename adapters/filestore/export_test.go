//go:build unix

package filestore

import "context"

// LockForTest takes the writer lock of key as a Put would, for tests that
// hold it from another process.
func LockForTest(ctx context.Context, s *Store, key string) (unlock func(), err error) {
	if err := s.mkdirs(key); err != nil {
		return nil, err
	}
	return lock(ctx, s.path(key))
}
