//go:build unix

package redistest

import "syscall"

// The signals of Pause and Resume.
var stopSignal, contSignal = syscall.SIGSTOP, syscall.SIGCONT
