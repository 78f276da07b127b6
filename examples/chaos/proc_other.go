//go:build !linux

package main

import "os/exec"

// dieWithParent: only Linux has Pdeathsig; elsewhere a worker notices its
// parent is gone when its stdin closes.
func dieWithParent(*exec.Cmd) {}
