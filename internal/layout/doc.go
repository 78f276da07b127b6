// Package layout is the key layout of a Conveyor store: every key is built
// and parsed here, and every id is validated (storage.ErrInvalidID) before it
// becomes part of one. The layout itself is documented in
// docs/spec.md#key-layout; these functions are the SDK's own.
package layout
