//go:build lockproxy_negative_control

package quorum

import (
	"fmt"
	"os"
)

// The binary of the end-to-end safety runs' negative controls (go build
// -tags lockproxy_negative_control), never lockproxy: it breaks the safety
// mechanism LOCKPROXY_NEGATIVE_CONTROL names in every engine (hooks.go), so
// that a run shows its checkers catch the breach.
func init() {
	switch v := os.Getenv("LOCKPROXY_NEGATIVE_CONTROL"); v {
	case "fence":
		negativeControl.brokenFence = true
	case "set":
		negativeControl.brokenSet = true
	case "horizon":
		negativeControl.ignoreHorizon = true
	default:
		panic(fmt.Sprintf("a negative control's build: LOCKPROXY_NEGATIVE_CONTROL must be fence, set or horizon, not %q", v))
	}
}
