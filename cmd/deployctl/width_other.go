//go:build !unix

package main

import "os"

// ttyWidth is the width of the terminal f, 0 when unknown (not asked on
// this platform: $COLUMNS or 80).
func ttyWidth(*os.File) int { return 0 }
