//go:build unix

package main

import "syscall"

// umask sets the process's file mode creation mask and returns the one
// before.
func umask(mask int) int { return syscall.Umask(mask) }
