package storage

import "context"

// CheckWatch is what the Store checks before watching prefix: the
// prefix can start a valid key, and ctx is not done.
func CheckWatch(ctx context.Context, prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return NewOpError("watch", prefix, nil, err)
	}
	if err := ctx.Err(); err != nil {
		return NewOpError("watch", prefix, err, nil)
	}
	return nil
}
