//go:build !linux

package miniotest

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death signal;
// Stop still ends the server when a test finishes normally.
func dieWithParent(*exec.Cmd) {}
