package miniotest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill MinIO when the test process dies, even
// by a timeout panic or SIGKILL, so no server outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
