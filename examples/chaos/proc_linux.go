package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill a worker when the parent dies, even
// by SIGKILL, so that no worker outlives its run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
