//go:build race

package main

// The end-to-end tests run a binary built with -race when the tests do.
func init() { buildFlags = append(buildFlags, "-race") }
