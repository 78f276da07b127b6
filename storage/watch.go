package storage

import (
	"context"

	"github.com/runconveyor/conveyor/internal/storekey"
)

// checkWatch is what the Store checks before watching prefix: the
// prefix can start a valid key, and ctx is not done.
func checkWatch(ctx context.Context, prefix string) error {
	if err := storekey.ValidatePrefix(prefix); err != nil {
		return newOpError("watch", prefix, nil, err)
	}
	if err := ctx.Err(); err != nil {
		return newOpError("watch", prefix, err, nil)
	}
	return nil
}
