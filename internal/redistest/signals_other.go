//go:build !unix

package redistest

// No signal stops and continues a process here (Windows): Process.Signal
// refuses these, so Pause and Resume do nothing, and kill goes straight to
// Kill. The package builds, so that the tests that import it vet.
var stopSignal, contSignal = unsupportedSignal("SIGSTOP"), unsupportedSignal("SIGCONT")

type unsupportedSignal string

func (s unsupportedSignal) Signal()        {}
func (s unsupportedSignal) String() string { return string(s) }
