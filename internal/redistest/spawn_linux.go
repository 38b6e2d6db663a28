package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill cmd when the thread that starts it
// dies (see spawn).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
