//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// ttyWidth is the width of the terminal f, 0 when unknown.
func ttyWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
