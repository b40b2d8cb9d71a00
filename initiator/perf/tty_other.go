//go:build !linux

package perf

import "os"

// isTerminal reports false off Linux: perf prints one progress line per second.
func isTerminal(f *os.File) bool { return false }
