package storage

import "time"

// Settler is an optional interface of a Store whose answers may be wrong
// for a bounded time: a distributed store such as a MinIO cluster, where
// for up to Settle() after a disturbance (a node stopping or restarting, a
// writer killed mid-request) a read of an existing key may answer not
// found, and a create-only Put may be accepted over an existing key.
// Outside those windows the Store's promises hold as written.
//
// Engines read the bound with SettleTime and use it for the decisions they
// cannot undo: a key read as missing is believed only when a read at least
// Settle() later still finds nothing, and an ownership that rests on a
// create-only write is checked again after Settle(). A Store that does not
// implement Settler (memstore, filestore, SQLite, a single-drive MinIO)
// settles at once, and those checks cost nothing.
type Settler interface {
	Settle() time.Duration
}

// Unwrapper is implemented by a Store that wraps another (a retrying,
// counting or fault-injecting wrapper), so optional interfaces such as
// Settler are found through it.
type Unwrapper interface {
	Unwrap() Store
}

// SettleTime is how long s may answer wrongly after a disturbance (see
// Settler): the first Settler found on s or the Stores it wraps, 0 when
// there is none.
func SettleTime(s Store) time.Duration {
	for i := 0; s != nil && i < 16; i++ { // bounded: a wrapper cycle is a bug, not a hang
		if st, ok := s.(Settler); ok {
			return st.Settle()
		}
		u, ok := s.(Unwrapper)
		if !ok {
			return 0
		}
		s = u.Unwrap()
	}
	return 0
}
