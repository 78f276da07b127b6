package storage

import "context"

// Watcher is an optional interface a Store implements when it can tell a
// reader, within milliseconds, that keys under a prefix changed, so that a
// worker waiting for new work wakes when it is written instead of at its
// next poll. Find it with a type assertion (s.(storage.Watcher)). A
// notification is only a hint: callers keep polling as the fallback (at a
// slower pace), and read the store to learn what changed.
//
// Watch starts watching the keys that start with prefix (a plain string
// prefix, as for List; "" watches every key) and returns a channel that
// receives a value when one of them may have changed. The contract:
//
//   - Every Put or Delete of a key under prefix that completes after Watch
//     has returned, by this Store or (where the adapter says so) by another
//     process or Store on the same backend, is followed by a receivable
//     value on the channel, promptly (the adapter documents how promptly).
//     Changes made before Watch returned may or may not be signalled.
//   - Signals coalesce: the channel has a buffer of one, and a change that
//     finds it full adds nothing. One receive can stand for many changes,
//     so a receiver re-reads everything it cares about after each one.
//   - Spurious signals are allowed (a change outside prefix, a write that
//     failed its condition, a lost event the adapter answers with a signal);
//     missed ones are not, while the channel is open.
//   - A watcher never blocks a writer: a channel nobody receives from
//     holds up no Put or Delete, and signalling costs a writer at most a
//     constant per watcher.
//   - When ctx is done the channel is closed, and every resource the watch
//     held (goroutines, descriptors) is released by the time the close is
//     received. The channel may also close earlier when the adapter can no
//     longer keep the watch (an exhausted kernel limit); the caller then
//     relies on polling, and may call Watch again.
//
// Watch checks prefix as List does (an invalid one gives an error matching
// ErrInvalidKey) and fails, without watching, with an error matching
// ctx.Err() when ctx is already done, or with one matching
// errors.ErrUnsupported where the adapter cannot watch on this platform;
// any error means: poll.
type Watcher interface {
	Watch(ctx context.Context, prefix string) (<-chan struct{}, error)
}

// CheckWatch is what every Watcher checks before watching prefix: the
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
