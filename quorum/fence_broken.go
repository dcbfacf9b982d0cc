//go:build lockproxy_broken_fence

package quorum

// A deliberately broken fencing, built only into the binary of the safety
// run's negative control (go build -tags lockproxy_broken_fence), never
// into lockproxy: the token is the one minted by the lowest-numbered
// backend that granted, and nothing is written back. Once backends'
// counters drift apart, tokens go back, and the checkers must say so.

// brokenFence returns the token settleFence grants instead of the
// quorum's, and true.
func brokenFence(seen []vote[ack]) (int64, bool) {
	first, token := -1, int64(0)
	for _, v := range seen {
		if v.err == nil && v.val.yes && (first < 0 || v.node < first) {
			first, token = v.node, v.val.fence
		}
	}
	return token, true
}
