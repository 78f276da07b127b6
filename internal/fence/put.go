package fence

import (
	"context"
	"errors"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Put writes an owner's object (a step file, an output, a manifest)
// at key so that a writer of an older epoch can never replace a newer
// writer's object: the object carries its writer's epoch, read back by
// epochOf, and a replacement is conditional on the version whose epoch was
// judged. A missing key is created create-only; an existing one is replaced
// only while its epoch is at most epoch, else the error matches
// lifecycle.ErrLeaseLost. owner names the writer in that error.
//
// The run's own lease is checked by the caller's status writes; Put
// makes sure that whatever a lost writer does, the object a newer owner
// wrote stays.
func Put(ctx context.Context, s *storage.Store, key string, value []byte, owner string, epoch int64, epochOf func([]byte) (int64, bool)) (storage.Version, error) {
	return PutFunc(ctx, s, key, owner, epoch, epochOf, func([]byte, storage.Version) ([]byte, bool, error) {
		return value, false, nil
	})
}

// PutFunc is Put for an object whose bytes depend on the one
// they replace (an artifact counts its versions and keeps its own earlier
// write). next is given the stored object and its version (nil and ""
// when the key is missing)
// once its epoch was judged no newer than epoch, and returns the bytes to
// write, or keep true to leave the stored object as it is (the version
// returned is then the stored one's), or an error that ends the write with
// nothing written. next may run more than once, after lost races, and must
// judge only its argument.
func PutFunc(ctx context.Context, s *storage.Store, key, owner string, epoch int64, epochOf func([]byte) (int64, bool), next func(old []byte, ver storage.Version) (value []byte, keep bool, err error)) (storage.Version, error) {
	value, _, err := next(nil, "")
	if err != nil {
		return "", err
	}
	cond := storage.IfNotExists()
	// A store that settles may take a create-only write over an existing
	// object, a newer owner's: there the object is read first, and
	// created only when read missing (one read more, on such a store only).
	readFirst := s.SettleTime() > 0
	for conflicts := 0; ; conflicts++ {
		var err error
		if !readFirst {
			var v storage.Version
			v, err = s.Put(ctx, key, value, cond)
			if err == nil || (!errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrOutcomeUnknown)) {
				return v, err
			}
			if conflicts >= MaxConflicts {
				return "", err
			}
		}
		readFirst = false
		old, ov, gerr := s.Get(ctx, key)
		switch {
		case errors.Is(gerr, storage.ErrNotFound):
			cond = storage.IfNotExists()
			if value, _, err = next(nil, ""); err != nil {
				return "", err
			}
			continue
		case gerr != nil:
			return "", gerr
		case errors.Is(err, storage.ErrOutcomeUnknown) && string(old) == string(value):
			return ov, nil // ours landed
		}
		if e, ok := epochOf(old); ok && e > epoch {
			return "", &lifecycle.LeaseLostError{Key: key, Owner: owner, Epoch: epoch, HolderEpoch: e}
		}
		var keep bool
		if value, keep, err = next(old, ov); err != nil {
			return "", err
		}
		if keep {
			return ov, nil
		}
		cond = storage.IfMatch(ov)
	}
}
