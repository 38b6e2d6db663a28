//go:build !linux

package redistest

import "os/exec"

// setDeathSignal does nothing outside Linux: a server left running by a
// test binary that crashed must be killed by hand there.
func setDeathSignal(*exec.Cmd) {}
