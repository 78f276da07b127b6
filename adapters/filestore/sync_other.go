//go:build unix && !linux

package filestore

import "errors"

// syncfsReliable: syncfs(2) is Linux's; elsewhere every write pays its
// own fsyncs.
func syncfsReliable() bool { return false }

func syncfs(int) error { return errors.ErrUnsupported }
