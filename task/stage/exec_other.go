//go:build !unix

package stage

import "os/exec"

// killGroupOnCancel: without process groups, a done context kills the
// command only (exec.CommandContext's default).
func killGroupOnCancel(*exec.Cmd) {}
