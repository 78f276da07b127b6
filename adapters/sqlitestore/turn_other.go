//go:build !unix

package sqlitestore

// turn is a no-op where flock(2) is missing: processes rely on SQLite's
// busy handler alone there, which is unfair under load.
type turn struct{}

func openTurn(string) (*turn, error) { return &turn{}, nil }
func (*turn) acquire() error         { return nil }
func (*turn) release()               {}
func (*turn) close()                 {}
