//go:build unix && !linux

package filestore

import (
	"errors"
	"os"
)

// syncfsReliable: syncfs(2) is Linux's; elsewhere every write pays its
// own fsyncs.
func syncfsReliable() bool { return false }

func syncfs(*os.File) error { return errors.ErrUnsupported }
