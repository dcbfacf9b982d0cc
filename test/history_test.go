package test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The safety run records every lock operation as the client saw it, on one
// monotonic clock (the test process's), then checks the history.

// opKind is what a client asked for.
type opKind int

const (
	opAcquire opKind = iota // SET key token NX PX ttl
	opExtend                // SET key token IFEQ token PX ttl
	opRelease               // EVAL compare-and-delete
)

// outcome is what the client was told.
type outcome int

const (
	outOK      outcome = iota // acquired / extended / released
	outHeld                   // nil or 0: held elsewhere, not held
	outError                  // an error reply (NOQUORUM ...): not done
	outUnknown                // no reply (timeout, connection lost): maybe done
)

// op is one recorded operation. Times are offsets from the history's start.
type op struct {
	Client  int
	Key     string
	Token   string
	Kind    opKind
	TTL     time.Duration // acquire and extend
	Call    time.Duration // just before the request was sent
	Return  time.Duration // just after the reply was received
	Outcome outcome
	Phase   string // the nemesis phase in force at Call
	Fence   int64  // an acquisition's fencing token, when the reply carried one
}

// history is safe for concurrent appends.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []op
	// faults is the nemesis schedule: what was done when.
	faults []fault
}

// fault is one nemesis action, for the report and for reading a failure.
type fault struct {
	At    time.Duration
	Phase string
	What  string
}

func newHistory() *history { return &history{start: time.Now()} }

// now is the offset of this instant on the history's clock.
func (h *history) now() time.Duration { return time.Since(h.start) }

func (h *history) add(o op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *history) addFault(phase, what string) {
	h.mu.Lock()
	h.faults = append(h.faults, fault{At: h.now(), Phase: phase, What: what})
	h.mu.Unlock()
}

// snapshot returns a copy of the operations recorded so far.
func (h *history) snapshot() ([]op, []fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]op(nil), h.ops...), append([]fault(nil), h.faults...)
}

// awaitGrants waits until the history has n granted acquisitions called
// at or after from: a workload's length as a count of operations.
func awaitGrants(t *testing.T, h *history, from time.Duration, n int) {
	t.Helper()
	redistest.Eventually(t, func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		got := 0
		for _, o := range h.ops {
			if o.Kind == opAcquire && o.Outcome == outOK && o.Call >= from {
				got++
			}
		}
		if got < n {
			return fmt.Sprintf("%d grants since %v, waiting for %d", got, from, n)
		}
		return ""
	})
}

// driftOf is lockproxy's clock-drift allowance for a TTL at the default
// drift_factor: a holder may count on its lock until send time + TTL − drift.
func driftOf(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*0.01) + 2*time.Millisecond
}

// resourceLog is the protected resource: a per-key log that holders append
// to while they believe they hold the lock, fenced as a real resource must
// be. It keeps the largest fencing token it accepted per key and refuses a
// write with a smaller one; an equal one is the same holder writing again.
// It looks at no clock: a holder paused or slow past its lease still
// writes, and only the token can stop it, which is what fencing is for.
// Refused writes stay in the log, marked, for the checker and the report.
type resourceLog struct {
	h       *history
	mu      sync.Mutex
	entries map[string][]resourceEntry
	fence   map[string]int64 // per key, the largest token accepted
}

// resourceEntry is one write offered to the resource.
type resourceEntry struct {
	Token   string
	Fence   int64
	At      time.Duration
	Phase   string
	Refused bool
}

func newResourceLog(h *history) *resourceLog {
	return &resourceLog{h: h, entries: map[string][]resourceEntry{}, fence: map[string]int64{}}
}

// write offers token's write, carrying fencing token fence, to key's
// resource and reports whether the resource accepted it.
func (r *resourceLog) write(key, token string, fence int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	refused := fence < r.fence[key]
	if !refused {
		r.fence[key] = fence
	}
	r.entries[key] = append(r.entries[key], resourceEntry{Token: token, Fence: fence, At: r.h.now(), Phase: r.h.phase(), Refused: refused})
	return !refused
}

func (r *resourceLog) snapshot() map[string][]resourceEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]resourceEntry, len(r.entries))
	for k, v := range r.entries {
		out[k] = append([]resourceEntry(nil), v...)
	}
	return out
}
