package test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker's own tests: on histories written by hand, on a large clean
// one, and on histories of a simulated lock server, correct and broken. Every
// TTL is 100 ms unless said otherwise, so drift is 3 ms and an acquisition
// sent at c is valid until c + 97 ms.

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func synthOp(kind opKind, client int, key, token string, ttl, call, ret float64, out outcome) op {
	return op{Client: client, Key: key, Token: token, Kind: kind, TTL: msDur(ttl),
		Call: msDur(call), Return: msDur(ret), Outcome: out}
}

func synthAcquire(client int, token string, call, ret float64, out outcome) op {
	return synthOp(opAcquire, client, "k", token, 100, call, ret, out)
}

func synthExtend(client int, token string, call, ret float64, out outcome) op {
	return synthOp(opExtend, client, "k", token, 100, call, ret, out)
}

func synthRelease(client int, token string, call, ret float64, out outcome) op {
	return synthOp(opRelease, client, "k", token, 0, call, ret, out)
}

func synthHolding(client int, token string, start, end float64) holding {
	return holding{Client: client, Token: token, Start: msDur(start), End: msDur(end)}
}

func TestCheckerHistories(t *testing.T) {
	proxyTest(t)
	for _, tc := range []struct {
		name     string
		ops      []op
		holdings []holding // of key "k", in order
		overlaps int
		linear   porcupine.CheckResult
	}{{
		name: "clean sequential history with contention",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthAcquire(3, "c", 10, 11, outHeld),
			synthAcquire(4, "d", 12, 13, outError),
			synthRelease(1, "a", 40, 41, outOK),
			synthAcquire(2, "b", 42, 43, outOK),
			synthExtend(2, "b", 80, 81, outOK),
			synthRelease(2, "b", 120, 121, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 40), synthHolding(2, "b", 43, 120)},
		linear:   porcupine.Ok,
	}, {
		name: "second holder granted inside the first's validity",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthAcquire(2, "b", 50, 51, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97), synthHolding(2, "b", 51, 147)},
		overlaps: 1,
		linear:   porcupine.Illegal,
	}, {
		// Holdings are half-open: a's ends at 97 ms, where b's begins.
		name: "OK received exactly when the previous validity ended",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthAcquire(2, "b", 90, 97, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97), synthHolding(2, "b", 97, 187)},
		linear:   porcupine.Ok,
	}, {
		// The holding starts at receipt: b was sent while a was valid, but
		// it could act only once its OK arrived, after a's validity.
		name: "OK received after the previous validity ended",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthAcquire(2, "b", 90, 98, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97), synthHolding(2, "b", 98, 187)},
		linear:   porcupine.Ok,
	}, {
		// b's acquisition returns before a's release does: the release took
		// effect in between.
		name: "release ends a holding at its call",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthRelease(1, "a", 30, 45, outOK),
			synthAcquire(2, "b", 40, 44, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 30), synthHolding(2, "b", 44, 137)},
		linear:   porcupine.Ok,
	}, {
		name: "release with no reply still ends the holding, and may have freed the lock",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthRelease(1, "a", 10, 20, outUnknown),
			synthAcquire(2, "b", 15, 18, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 10), synthHolding(2, "b", 18, 112)},
		linear:   porcupine.Ok,
	}, {
		// The proxy rolled a's failed extension back, so b may take the
		// lock long before a's lease would have run out.
		name: "failed extension ends a holding at its call",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthExtend(1, "a", 30, 40, outError),
			synthAcquire(2, "b", 35, 38, outOK),
			synthRelease(1, "a", 41, 42, outHeld),
		},
		holdings: []holding{synthHolding(1, "a", 1, 30), synthHolding(2, "b", 38, 132)},
		linear:   porcupine.Ok,
	}, {
		name: "successful extension prolongs a holding",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthExtend(1, "a", 50, 51, outOK),
			synthAcquire(2, "b", 140, 148, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 147), synthHolding(2, "b", 148, 237)},
		linear:   porcupine.Ok,
	}, {
		// An extension sets a new PX, it does not add to the old one: a's key
		// is known to live only until 10 + 20 − 2.2 ms, so b may follow.
		name: "extension with a shorter TTL shortens a holding",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthOp(opExtend, 1, "k", "a", 20, 10, 11, outOK),
			synthAcquire(2, "b", 30, 31, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 27.8), synthHolding(2, "b", 31, 127)},
		linear:   porcupine.Ok,
	}, {
		name: "overlap inside the prolonged part",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthExtend(1, "a", 50, 51, outOK),
			synthAcquire(2, "b", 120, 121, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 147), synthHolding(2, "b", 121, 217)},
		overlaps: 1,
		linear:   porcupine.Illegal,
	}, {
		name: "extension sent after expiry does not prolong",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthExtend(1, "a", 98, 99, outOK),
			synthRelease(1, "a", 150, 151, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97)},
		linear:   porcupine.Ok,
	}, {
		// Here the two checks differ, on purpose. No client relied on a
		// after 97 ms, so no holdings overlap; but the proxy said a's key was
		// extended to 195 ms on a quorum at 98 ms and then granted b the same
		// key at 101 ms, and both cannot be true.
		name: "late extension reported OK, then another holder",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthExtend(1, "a", 98, 99, outOK),
			synthAcquire(2, "b", 100, 101, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97), synthHolding(2, "b", 101, 197)},
		linear:   porcupine.Illegal,
	}, {
		name: "OK received after validity ran out is no holding",
		ops: []op{
			synthAcquire(1, "a", 0, 98, outOK),
			synthAcquire(2, "b", 97, 99, outOK),
		},
		holdings: []holding{synthHolding(2, "b", 99, 194)},
		linear:   porcupine.Ok,
	}, {
		name: "release by a token that never acquired, reported OK",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthRelease(2, "b", 10, 11, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97)},
		linear:   porcupine.Illegal,
	}, {
		name: "release reported OK after its acquisition was refused",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthAcquire(2, "b", 5, 6, outHeld),
			synthRelease(2, "b", 10, 11, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97)},
		linear:   porcupine.Illegal,
	}, {
		name: "extension by a non-holder reported OK",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthExtend(2, "b", 10, 11, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97)},
		linear:   porcupine.Illegal,
	}, {
		// b's acquisition timed out at the client but took effect: its
		// later OK release proves it, and that is no violation.
		name: "acquisition with no reply, proven by a later OK release",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthRelease(1, "a", 10, 11, outOK),
			synthAcquire(2, "b", 20, 60, outUnknown),
			synthRelease(2, "b", 61, 62, outOK),
			synthAcquire(1, "c", 63, 64, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 10), synthHolding(1, "c", 64, 160)},
		linear:   porcupine.Ok,
	}, {
		// The client gave up on b at 30 ms while a still held the lock; the
		// acquisition went on inside the proxy and took effect after a's
		// lease, as b's OK release at 120 ms shows.
		name: "acquisition with no reply that took effect after the client gave up",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthAcquire(2, "b", 20, 30, outUnknown),
			synthRelease(2, "b", 120, 121, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97)},
		linear:   porcupine.Ok,
	}, {
		name: "keys are independent",
		ops: []op{
			synthAcquire(1, "a", 0, 1, outOK),
			synthOp(opAcquire, 2, "other", "b", 100, 10, 11, outOK),
		},
		holdings: []holding{synthHolding(1, "a", 1, 97)},
		linear:   porcupine.Ok,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			hs := holdings(tc.ops)
			if exp, got := tc.holdings, hs["k"]; !slices.Equal(exp, got) {
				t.Errorf("holdings of k: expected %v, got %v", exp, got)
			}
			overlaps := checkOverlaps(hs)
			if exp, got := tc.overlaps, len(overlaps); exp != got {
				t.Errorf("expected %d overlaps, got %v", exp, overlaps)
			}
			res, info := checkLinearizable(tc.ops, 10*time.Second)
			if exp, got := tc.linear, res; exp != got {
				t.Errorf("expected porcupine %s, got %s", exp, got)
			}
			lines := describeLinearization(tc.ops, res, info)
			if exp, got := res == porcupine.Illegal, len(lines) > 0; exp != got {
				t.Errorf("porcupine %s described as %q", res, lines)
			}
			for _, l := range lines {
				if !strings.Contains(l, `key "k"`) {
					t.Errorf("description names no key: %s", l)
				}
			}
		})
	}
}

func TestCheckerResource(t *testing.T) {
	proxyTest(t)
	e := func(token string, at float64) resourceEntry { return resourceEntry{Token: token, At: msDur(at)} }
	for _, tc := range []struct {
		name string
		log  map[string][]resourceEntry
		exp  []interleaving
	}{{
		name: "A A B B",
		log:  map[string][]resourceEntry{"k": {e("a", 1), e("a", 2), e("b", 3), e("b", 4)}},
	}, {
		name: "A B A",
		log:  map[string][]resourceEntry{"k": {e("a", 1), e("a", 2), e("b", 3), e("a", 4)}},
		exp:  []interleaving{{Key: "k", First: e("a", 2), Second: e("b", 3), Again: e("a", 4)}},
	}, {
		name: "A B A B is two resumptions",
		log:  map[string][]resourceEntry{"k": {e("a", 1), e("b", 2), e("a", 3), e("b", 4)}},
		exp: []interleaving{
			{Key: "k", First: e("a", 1), Second: e("b", 2), Again: e("a", 3)},
			{Key: "k", First: e("b", 2), Second: e("a", 3), Again: e("b", 4)},
		},
	}, {
		name: "A B C A",
		log:  map[string][]resourceEntry{"k": {e("a", 1), e("b", 2), e("c", 3), e("a", 4)}},
		exp:  []interleaving{{Key: "k", First: e("a", 1), Second: e("b", 2), Again: e("a", 4)}},
	}, {
		name: "A B A refused",
		log:  map[string][]resourceEntry{"k": {e("a", 1), e("b", 2), {Token: "a", At: msDur(3), Refused: true}, e("b", 4)}},
	}, {
		name: "the same tokens on different keys",
		log: map[string][]resourceEntry{
			"k1": {e("a", 1), e("b", 3)},
			"k2": {e("b", 2), e("a", 4)},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if exp, got := tc.exp, checkResource(tc.log); !slices.Equal(exp, got) {
				t.Errorf("expected %v, got %v", exp, got)
			}
		})
	}
}

// TestResourceFenced: the protected resource keeps the largest token it
// accepted per key, accepts it again and refuses a smaller one, whenever
// the write comes.
func TestResourceFenced(t *testing.T) {
	proxyTest(t)
	r := newResourceLog(newHistory())
	for _, w := range []struct {
		key, token string
		fence      int64
		exp        bool
	}{
		{"k", "a", 10, true},
		{"k", "a", 10, true}, // the holder again
		{"k", "b", 20, true},
		{"k", "a", 10, false}, // cut off by b
		{"j", "a", 10, true},  // another key, another resource
		{"k", "c", 15, false}, // a token that went back
		{"k", "b", 20, true},
	} {
		if got := r.write(w.key, w.token, w.fence); got != w.exp {
			t.Errorf("%s writes %d to %s: accepted %v, want %v", w.token, w.fence, w.key, got, w.exp)
		}
	}
	var refused []string
	for _, e := range r.snapshot()["k"] {
		if e.Refused {
			refused = append(refused, e.Token)
		}
	}
	if exp, got := []string{"a", "c"}, refused; !slices.Equal(exp, got) {
		t.Errorf("refused writes in the log: expected %v, got %v", exp, got)
	}
}

// TestCheckerFencedWrites: a write accepted after one by a holder granted
// later, and a holder refused while it holds the lock, are each reported
// once per writer; a stale holder refused after its holding is fencing
// doing its job.
func TestCheckerFencedWrites(t *testing.T) {
	proxyTest(t)
	grant := func(client int, token string, call, ret float64, fence int64) op {
		o := synthAcquire(client, token, call, ret, outOK)
		o.Fence = fence
		return o
	}
	// a holds [1, 97], b [201, 297].
	inOrder := []op{grant(1, "a", 0, 1, 10), grant(2, "b", 200, 201, 20)}
	backwards := []op{grant(1, "a", 0, 1, 30), grant(2, "b", 200, 201, 20)}
	w := func(token string, at float64, fence int64, refused bool) resourceEntry {
		return resourceEntry{Token: token, At: msDur(at), Fence: fence, Refused: refused}
	}
	for _, tc := range []struct {
		name  string
		ops   []op
		log   []resourceEntry
		found int
	}{
		{"the stale holder refused late", inOrder, []resourceEntry{w("a", 5, 10, false), w("b", 205, 20, false), w("a", 210, 10, true)}, 0},
		{"the stale holder accepted late, nobody after it", inOrder, []resourceEntry{w("a", 5, 10, false), w("a", 150, 10, false), w("b", 205, 20, false)}, 0},
		{"the stale holder accepted after the next", backwards, []resourceEntry{w("a", 5, 30, false), w("b", 205, 20, false), w("a", 210, 30, false), w("a", 220, 30, false)}, 1},
		{"the next holder refused while it holds", backwards, []resourceEntry{w("a", 5, 30, false), w("b", 205, 20, true), w("b", 215, 20, true)}, 1},
		{"the next holder refused after its holding", backwards, []resourceEntry{w("a", 5, 30, false), w("b", 300, 20, true)}, 0},
		{"a holder without a holding refused", []op{grant(1, "a", 0, 1, 30), grant(2, "b", 200, 300, 20)}, []resourceEntry{w("a", 5, 30, false), w("b", 305, 20, true)}, 0},
		{"a write by no grant", inOrder, []resourceEntry{w("b", 205, 20, false), w("x", 210, 1, false)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkFencedWrites(map[string][]resourceEntry{"k": tc.log}, tc.ops); len(got) != tc.found {
				t.Errorf("found %d, want %d: %q", len(got), tc.found, got)
			}
		})
	}
}

func TestCheckerDescriptions(t *testing.T) {
	proxyTest(t)
	o := overlap{Key: "k", A: synthHolding(1, "a", 1, 97), B: synthHolding(2, "b", 51, 147)}
	if exp, got := `key "k": client 1 (token a) [1.0ms, 97.0ms] and client 2 (token b) [51.0ms, 147.0ms] both held it for 46.0ms`, o.String(); exp != got {
		t.Errorf("overlap:\nexpected %s\ngot      %s", exp, got)
	}
	i := interleaving{Key: "k",
		First:  resourceEntry{Token: "a", At: msDur(2)},
		Second: resourceEntry{Token: "b", At: msDur(3)},
		Again:  resourceEntry{Token: "a", At: msDur(4)}}
	if exp, got := `key "k": token a wrote at 2.0ms, token b at 3.0ms, then a again at 4.0ms`, i.String(); exp != got {
		t.Errorf("interleaving:\nexpected %s\ngot      %s", exp, got)
	}
	ops := []op{synthAcquire(1, "a", 0, 1, outOK), synthRelease(2, "b", 10, 11, outOK)}
	res, info := checkLinearizable(ops, 10*time.Second)
	lines := describeLinearization(ops, res, info)
	if exp, got := []string{`key "k": only 1 of 2 operations linearize; the lock is then held by a until 97.0ms, ` +
		`and the earliest left out is release b by client 2 [10.0ms, 11.0ms] -> ok`}, lines; !slices.Equal(exp, got) {
		t.Errorf("linearization:\nexpected %q\ngot      %q", exp, got)
	}
	if exp, got := 1, len(describeLinearization(nil, porcupine.Unknown, porcupine.LinearizationInfo{})); exp != got {
		t.Errorf("expected %d line for a timeout, got %d", exp, got)
	}
}

// cleanHistory is n operations over keys keys by clients clients, in a
// clean pattern: per key, its clients take turns to acquire, extend and
// release, another of them is refused meanwhile, and each next acquisition
// is sent while the previous release is still in flight. Holders write to
// the resource twice. It also returns the number of holdings.
func cleanHistory(n, keys, clients int) ([]op, map[string][]resourceEntry, int) {
	var ops []op
	log := map[string][]resourceEntry{}
	clock := make([]float64, keys)
	turn := make([]int, keys)
	acquired := 0
	for i := 0; len(ops) < n; i++ {
		k := i % keys
		key := fmt.Sprintf("key%d", k)
		// Clients k, k+keys, k+2·keys, ... use key k, so each client's
		// operations are sequential.
		mine := (clients - k + keys - 1) / keys
		holder := k + keys*(turn[k]%mine)
		other := k + keys*((turn[k]+1)%mine)
		turn[k]++
		t := clock[k]
		token, refused := fmt.Sprintf("c%d-%d", holder, i), fmt.Sprintf("c%d-%d-x", other, i)
		ops = append(ops,
			synthOp(opAcquire, holder, key, token, 100, t, t+1, outOK),
			synthOp(opAcquire, other, key, refused, 100, t+2, t+3, outHeld),
			synthOp(opExtend, holder, key, token, 100, t+10, t+11, outOK),
			synthOp(opRelease, holder, key, token, 0, t+20, t+21, outOK))
		log[key] = append(log[key], resourceEntry{Token: token, At: msDur(t + 5)}, resourceEntry{Token: token, At: msDur(t + 15)})
		acquired++
		clock[k] = t + 20.5
	}
	return ops, log, acquired
}

func TestCheckerLargeHistory(t *testing.T) {
	proxyTest(t)
	ops, log, acquired := cleanHistory(20000, 3, 16)
	hs := holdings(ops)
	n := 0
	for _, h := range hs {
		n += len(h)
	}
	if exp, got := acquired, n; exp != got {
		t.Errorf("expected %d holdings, got %d", exp, got)
	}
	if got := checkOverlaps(hs); len(got) != 0 {
		t.Errorf("expected no overlaps, got %d, first %s", len(got), got[0])
	}
	if got := checkResource(log); len(got) != 0 {
		t.Errorf("expected no interleavings, got %d, first %s", len(got), got[0])
	}
	if exp, got := porcupine.Ok, linResult(checkLinearizable(ops, time.Minute)); exp != got {
		t.Errorf("expected porcupine %s, got %s", exp, got)
	}

	t.Run("one overlap injected", func(t *testing.T) {
		// A second grant of key0 in the middle of a holding there: both
		// checks must still find it in a history this size.
		i := len(ops) / 2
		for ops[i].Key != "key0" || ops[i].Kind != opAcquire || ops[i].Outcome != outOK {
			i++
		}
		// Its TTL is short enough that it overlaps that one holding only.
		at := float64(ops[i].Call) / float64(time.Millisecond)
		bad := append(slices.Clone(ops), synthOp(opAcquire, 99, "key0", "intruder", 10, at+4, at+5, outOK))
		if exp, got := 1, len(checkOverlaps(holdings(bad))); exp != got {
			t.Errorf("expected %d overlap, got %d", exp, got)
		}
		if exp, got := porcupine.Illegal, linResult(checkLinearizable(bad, time.Minute)); exp != got {
			t.Errorf("expected porcupine %s, got %s", exp, got)
		}
	})
}

// linResult drops the LinearizationInfo where only the verdict matters.
func linResult(res porcupine.CheckResult, _ porcupine.LinearizationInfo) porcupine.CheckResult {
	return res
}

// simulateLocks runs clients against a simulated single lock server, with
// lost replies and failed requests, and returns the history they record:
// what the safety run records, without the processes. Each request takes
// effect at one instant between its Call and Return. A broken server grants
// an acquisition whatever the key's state once in every broken requests.
func simulateLocks(seed uint64, clients, keys, n, broken int) []op {
	rng := rand.New(rand.NewPCG(seed, 1))
	const ttl = 100 * time.Millisecond
	type lock struct {
		token   string
		expires time.Duration // on the server
	}
	server := map[string]lock{}
	type step struct {
		at     time.Duration
		client int
		o      op
	}
	var ops []op
	// Each client's next request; the simulation applies the one whose
	// effect comes first.
	next := make([]step, clients)
	plan := func(c int, kind opKind, key, token string, after time.Duration) {
		call := after + time.Duration(rng.IntN(5000))*time.Microsecond
		next[c] = step{at: call + time.Duration(rng.IntN(3000))*time.Microsecond, client: c,
			o: op{Client: c, Key: key, Token: token, Kind: kind, TTL: ttl, Call: call}}
	}
	for c := range next {
		plan(c, opAcquire, fmt.Sprintf("key%d", rng.IntN(keys)), fmt.Sprintf("c%d-0", c), 0)
	}
	for seq := 1; len(ops) < n; seq++ {
		s := slices.MinFunc(next, func(a, b step) int { return cmp.Compare(a.at, b.at) })
		o := s.o
		l, held := server[o.Key]
		held = held && l.expires > s.at
		failed := rng.IntN(20) == 0 // fewer than a quorum answered: no effect
		ok := false
		if !failed {
			switch o.Kind {
			case opAcquire:
				ok = !held || (broken > 0 && rng.IntN(broken) == 0)
				if ok {
					server[o.Key] = lock{o.Token, s.at + ttl}
				}
			case opExtend:
				ok = held && l.token == o.Token
				if ok {
					server[o.Key] = lock{o.Token, s.at + ttl}
				} else if l.token == o.Token {
					delete(server, o.Key) // the rollback of a failed extension
				}
			case opRelease:
				ok = held && l.token == o.Token
				if l.token == o.Token {
					delete(server, o.Key)
				}
			}
		}
		o.Return = s.at + time.Duration(rng.IntN(3000))*time.Microsecond
		switch {
		case rng.IntN(30) == 0:
			o.Outcome = outUnknown // the reply was lost, whatever happened
		case failed:
			o.Outcome = outError
		case ok:
			o.Outcome = outOK
		default:
			o.Outcome = outHeld
		}
		ops = append(ops, o)
		// The client's next step, as runClient takes them.
		c, token := s.client, fmt.Sprintf("c%d-%d", s.client, seq)
		deadline := o.Call + ttl - driftOf(ttl)
		switch {
		case o.Kind == opAcquire && o.Outcome == outOK && rng.IntN(3) == 0:
			plan(c, opExtend, o.Key, o.Token, o.Return+time.Duration(rng.Int64N(int64(ttl/2))))
		case o.Kind == opAcquire && o.Outcome == outOK,
			o.Kind == opExtend && o.Outcome == outOK:
			plan(c, opRelease, o.Key, o.Token, min(o.Return+time.Duration(rng.Int64N(int64(ttl))), deadline+ttl/4))
		case o.Kind == opExtend:
			plan(c, opRelease, o.Key, o.Token, o.Return)
		default: // back off, so that most of the history is holders' operations
			plan(c, opAcquire, fmt.Sprintf("key%d", rng.IntN(keys)), token, o.Return+time.Duration(rng.Int64N(int64(3*ttl))))
		}
	}
	return ops
}

func TestCheckerSimulatedServer(t *testing.T) {
	proxyTest(t)
	for seed := range uint64(5) {
		t.Run(fmt.Sprintf("correct server, seed %d", seed), func(t *testing.T) {
			ops := simulateLocks(seed, 16, 3, 20000, 0)
			if got := checkOverlaps(holdings(ops)); len(got) != 0 {
				t.Errorf("expected no overlaps, got %d, first %s", len(got), got[0])
			}
			res, info := checkLinearizable(ops, time.Minute)
			if exp, got := porcupine.Ok, res; exp != got {
				t.Errorf("expected porcupine %s, got %s: %q", exp, got, describeLinearization(ops, res, info))
			}
		})
		t.Run(fmt.Sprintf("broken server, seed %d", seed), func(t *testing.T) {
			ops := simulateLocks(seed, 16, 3, 20000, 50)
			if got := checkOverlaps(holdings(ops)); len(got) == 0 {
				t.Error("expected overlaps, got none")
			}
			if exp, got := porcupine.Illegal, linResult(checkLinearizable(ops, time.Minute)); exp != got {
				t.Errorf("expected porcupine %s, got %s", exp, got)
			}
		})
	}
}

// TestCheckerFences: checkFences finds a grant whose token is not above
// that of a grant which returned before it was asked for, and a grant
// without a token; grants that overlap in time may come in either order.
func TestCheckerFences(t *testing.T) {
	proxyTest(t)
	grant := func(token string, call, ret time.Duration, fence int64) op {
		return op{Key: "k", Token: token, Kind: opAcquire, Outcome: outOK, Call: call * time.Millisecond, Return: ret * time.Millisecond, Fence: fence}
	}
	for _, tc := range []struct {
		name  string
		ops   []op
		found int
	}{
		{"increasing", []op{grant("a", 0, 1, 10), grant("b", 2, 3, 11), grant("c", 4, 5, 30)}, 0},
		{"concurrent, either order", []op{grant("a", 0, 5, 20), grant("b", 1, 4, 10)}, 0},
		{"regression", []op{grant("a", 0, 1, 10), grant("b", 2, 3, 9)}, 1},
		{"equal", []op{grant("a", 0, 1, 10), grant("b", 2, 3, 10)}, 1},
		{"regression behind an earlier one", []op{grant("a", 0, 1, 50), grant("b", 2, 3, 60), grant("c", 4, 5, 55)}, 1},
		{"no token", []op{grant("a", 0, 1, 10), grant("b", 2, 3, 0)}, 1},
		{"other keys and outcomes ignored", []op{grant("a", 0, 1, 10),
			{Key: "j", Token: "x", Kind: opAcquire, Outcome: outOK, Call: 2 * time.Millisecond, Return: 3 * time.Millisecond, Fence: 1},
			{Key: "k", Token: "y", Kind: opAcquire, Outcome: outHeld, Call: 2 * time.Millisecond, Return: 3 * time.Millisecond}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkFences(tc.ops); len(got) != tc.found {
				t.Errorf("found %d, want %d: %q", len(got), tc.found, got)
			}
		})
	}
}
