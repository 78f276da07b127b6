// Package procid names the process in leases: the Owner a Runner and a
// Client take when their config sets none.
package procid

import (
	"os"
	"path/filepath"
)

// Owner is the host name and the executable's base name, e.g.
// "worker-7/conveyor-worker". It is stable across restarts of the same
// program on the same host (a pod name, a VM), so a restarted process
// resumes its runs at once.
func Owner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	exe := "conveyor"
	if p, err := os.Executable(); err == nil {
		exe = filepath.Base(p)
	}
	return host + "/" + exe
}
