//go:build !unix

package sqlitestore

import "time"

// turn is a no-op where flock(2) is missing: processes rely on SQLite's
// busy handler alone there, which is unfair under load.
type turn struct{}

func openTurn(string) (*turn, error) { return &turn{}, nil }
func (*turn) try() (bool, error)     { return true, nil }
func (*turn) abandon()               {}
func (*turn) release()               {}
func (*turn) close()                 {}
func (*turn) wait(d time.Duration)   { time.Sleep(d) }
