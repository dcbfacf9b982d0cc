package test

// The checker of the safety run. It judges a recorded history four ways,
// because each way sees something the others cannot:
//
//   - The interval check (holdings, checkOverlaps) states mutual exclusion
//     exactly as the brief defines it: a client holds a key from the moment it
//     received OK until it sent its release, sent an extension that failed, or
//     its validity (send time + TTL − drift, moved by successful extensions)
//     ran out; no two such intervals of one key may overlap. It is a sort and
//     a sweep, so it is fast and its verdict needs no search to explain.
//   - The linearizability check (checkLinearizable) asks porcupine whether the
//     acquire/extend/release history could have come from one register that
//     holds the holder's token with a lease. Beyond overlapping acquisitions it
//     catches what the intervals cannot see: an extension or a release by a
//     token that does not hold the lock being reported OK, and an extension
//     reported OK after the lock was already someone else's. It judges what the
//     proxy said; the intervals judge what the clients relied on.
//   - The fencing check (checkFences) reads the tokens: each grant's must be
//     above that of every grant of the key that returned before it was asked
//     for.
//   - The resource checks (checkResource, checkFencedWrites) look at what
//     holders actually did under the lock: every holder writes to a per-key
//     resource with its fencing token, at any time, even past its lease,
//     and the resource refuses a token below the largest it accepted, as a
//     real fenced resource does. Since such a resource orders writers by
//     token whatever the tokens are, what it accepted is judged against the
//     grants: once a second holder has written, the first may never write
//     again; no write may be accepted after one by a holder granted later;
//     and no holder may be refused while it holds the lock. They catch
//     what tokens that go back do to a resource, where checkFences sees
//     only the numbers.

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// holding is the stretch of the history clock during which a client relied
// on a lock it was granted.
type holding struct {
	Client     int
	Token      string
	Start, End time.Duration
}

func (h holding) String() string {
	return fmt.Sprintf("client %d (token %s) [%s, %s]", h.Client, h.Token, msString(h.Start), msString(h.End))
}

// holdings returns, per key and sorted by start, the holdings of every
// acquisition reported OK. A holding starts when the client received the OK:
// it can act only after that, and starting at the send time would report
// overlaps that no client could have acted on. It ends at the earliest of:
//   - the Call of that token's release, whatever its outcome: the client
//     stops relying on the lock when it sends the release;
//   - the Call of that token's extension that did not return OK: the proxy
//     rolls a failed extension back, so the client must consider the lock lost;
//   - its validity: acquire Call + TTL − drift, replaced by each successful
//     extension sent before the validity reached so far ran out with that
//     extension's Call + TTL − drift. An extension sets a new PX, it does not
//     add to the old one, so its bound replaces the old bound (the workload
//     extends with the same TTL, so in practice this only ever moves the end
//     later). An extension sent after expiry does not revive the holding: the
//     workload only extends while it still holds.
//
// An acquisition whose OK arrived after its validity had already run out is
// no holding: the client never had a moment in which it could act.
func holdings(ops []op) map[string][]holding {
	type lockRef struct{ key, token string }
	acquired := map[lockRef]op{}
	after := map[lockRef][]op{}
	for _, o := range ops {
		ref := lockRef{o.Key, o.Token}
		switch {
		case o.Kind == opAcquire && o.Outcome == outOK:
			acquired[ref] = o
		case o.Kind == opExtend, o.Kind == opRelease:
			after[ref] = append(after[ref], o)
		}
	}
	out := map[string][]holding{}
	for ref, a := range acquired {
		end := a.Call + a.TTL - driftOf(a.TTL)
		later := after[ref]
		slices.SortFunc(later, func(x, y op) int { return cmp.Compare(x.Call, y.Call) })
		for _, o := range later {
			if o.Call < a.Return {
				// A client's operations are sequential: nothing it sent
				// before it had the OK can be a reaction to the OK.
				continue
			}
			if o.Call >= end {
				break // the holding had already run out
			}
			if o.Kind == opExtend && o.Outcome == outOK {
				end = o.Call + o.TTL - driftOf(o.TTL)
				continue
			}
			end = o.Call
			break
		}
		if end <= a.Return {
			continue
		}
		out[ref.key] = append(out[ref.key], holding{Client: a.Client, Token: a.Token, Start: a.Return, End: end})
	}
	for _, hs := range out {
		slices.SortFunc(hs, compareHoldings)
	}
	return out
}

func compareHoldings(a, b holding) int {
	return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End), cmp.Compare(a.Token, b.Token))
}

// overlap is two holdings of one key that were in force at the same time;
// A started no later than B.
type overlap struct {
	Key  string
	A, B holding
}

func (o overlap) String() string {
	both := min(o.A.End, o.B.End) - max(o.A.Start, o.B.Start)
	return fmt.Sprintf("key %q: %s and %s both held it for %s", o.Key, o.A, o.B, msString(both))
}

// checkOverlaps returns every pair of holdings of one key whose intervals
// intersect (A.Start < B.End && B.Start < A.End), keys in order. It sorts
// each key's holdings by start and sweeps, keeping only the holdings still
// open at the current start, so a clean history costs O(n log n).
func checkOverlaps(h map[string][]holding) []overlap {
	var found []overlap
	for _, key := range slices.Sorted(maps.Keys(h)) {
		hs := slices.Clone(h[key])
		slices.SortFunc(hs, compareHoldings)
		var open []holding // started no later than the current one, not yet ended
		for _, b := range hs {
			if b.End <= b.Start {
				continue // empty: in force at no moment
			}
			open = slices.DeleteFunc(open, func(a holding) bool { return a.End <= b.Start })
			for _, a := range open {
				found = append(found, overlap{Key: key, A: a, B: b})
			}
			open = append(open, b)
		}
	}
	return found
}

// interleaving is a write to the protected resource by a token that had
// already been followed by another: First was its last write before Second,
// another token's, and Again is its write after that.
type interleaving struct {
	Key                  string
	First, Second, Again resourceEntry
}

func (i interleaving) String() string {
	return fmt.Sprintf("key %q: token %s wrote at %s, token %s at %s, then %s again at %s",
		i.Key, i.First.Token, msString(i.First.At), i.Second.Token, msString(i.Second.At), i.Again.Token, msString(i.Again.At))
}

// checkResource returns every interleaving of accepted writes in the
// per-key resource logs, keys in order: once token B has written after
// token A, A must never write again (A…B…A). Each time a token resumes
// after being cut off, that is one interleaving. The log's order is the
// order of writes, which the resourceLog serialises, not the At times. The
// fenced resource lets A resume only if B's fencing token is not above
// A's: two holders with one token.
func checkResource(log map[string][]resourceEntry) []interleaving {
	var found []interleaving
	for _, key := range slices.Sorted(maps.Keys(log)) {
		// cut maps a token to its last write before another token wrote,
		// and that other token's write.
		type cutOff struct{ last, next resourceEntry }
		cut := map[string]cutOff{}
		entries := slices.DeleteFunc(slices.Clone(log[key]), func(e resourceEntry) bool { return e.Refused })
		for i := 1; i < len(entries); i++ {
			prev, e := entries[i-1], entries[i]
			if e.Token == prev.Token {
				continue
			}
			cut[prev.Token] = cutOff{last: prev, next: e}
			if c, ok := cut[e.Token]; ok {
				found = append(found, interleaving{Key: key, First: c.last, Second: c.next, Again: e})
			}
		}
	}
	return found
}

// checkFencedWrites judges what the fenced resource accepted and refused
// against the grants in ops, keys in order, and returns what breaks
// fencing, at most once per writer:
//   - a stale write accepted: holder A wrote after holder B had, B's grant
//     having been asked for after A's returned. B's token must be the
//     larger, so the resource should have refused A. This holds whatever
//     the clocks did.
//   - a holder refused during its holding (holdings): the resource had
//     accepted a token at least as large from another holder. With tokens
//     that follow the order of grants, that holder was granted after this
//     holding ended, so wrote after it, unless the holdings overlap. So
//     this rests on the drift allowance, as checkOverlaps does.
//
// A run in which every token goes back shows as the second: the resource
// keeps the largest token it saw and shuts every later holder out.
func checkFencedWrites(log map[string][]resourceEntry, ops []op) []string {
	type lockRef struct{ key, token string }
	grants := map[lockRef]op{}
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			grants[lockRef{o.Key, o.Token}] = o
		}
	}
	held := map[lockRef]holding{}
	for key, hs := range holdings(ops) {
		for _, h := range hs {
			held[lockRef{key, h.Token}] = h
		}
	}
	within := func(key string, e resourceEntry) bool {
		h, ok := held[lockRef{key, e.Token}]
		return ok && h.Start <= e.At && e.At < h.End
	}
	var found []string
	for _, key := range slices.Sorted(maps.Keys(log)) {
		reported := map[string]bool{}
		var newest op // of the writers accepted so far, the one asked for last
		var newestAt time.Duration
		for _, e := range log[key] {
			g, ok := grants[lockRef{key, e.Token}]
			switch {
			case !ok || reported[e.Token]:
			case e.Refused && within(key, e):
				reported[e.Token] = true
				found = append(found, fmt.Sprintf("key %q: %s (fencing token %d) was refused at %s while it held the lock",
					key, e.Token, e.Fence, msString(e.At)))
			case !e.Refused && newest.Call > g.Return:
				reported[e.Token] = true
				found = append(found, fmt.Sprintf("key %q: %s (fencing token %d, granted at %s) wrote at %s after %s (fencing token %d, asked for at %s) had written at %s",
					key, e.Token, e.Fence, msString(g.Return), msString(e.At), newest.Token, newest.Fence, msString(newest.Call), msString(newestAt)))
			}
			if ok && !e.Refused && g.Call > newest.Call {
				newest, newestAt = g, e.At
			}
		}
	}
	return found
}

// The linearizability model: per key, a register holding the holder's token
// and a lease, the moment (on the history clock) until which the holder's
// key is known to exist on a quorum. The lease is a lower bound: the
// backends keep a key for its TTL from when they received it, which is after
// the client's Call, less the drift the brief allows.
type leaseKind int

const (
	leaseAcquire leaseKind = iota // an acquisition that took effect
	leaseExtend                   // an extension reported OK
	leaseRelease                  // a release reported OK
	leaseLetGo                    // a release or extension not reported OK: it may have freed the lock
)

func (k leaseKind) String() string {
	return [...]string{"acquire", "extend", "release", "let go"}[k]
}

// leaseInput is one operation as the model sees it.
type leaseInput struct {
	Key   string
	Token string
	Kind  leaseKind
	Lease time.Duration // acquire, extend: Call + TTL − drift
	By    time.Duration // acquire: the latest moment it can have taken effect
}

// leaseState is the register of one key.
type leaseState struct {
	Holder string        // the holder's token; "" when free
	Lease  time.Duration // the holder's key exists at least until then
	// MaybeFree says the holder sent a release or an extension that did not
	// return OK. The proxy rolls a failed extension back and a release that
	// got an error or no reply may have deleted the key on a quorum, so the
	// register may be free or still held. That is the whole of the
	// nondeterminism, so a flag models it exactly: anyone may acquire, and
	// the holder's own OK extension or release is still legal.
	MaybeFree bool
}

func (s leaseState) String() string {
	switch {
	case s.Holder == "":
		return "free"
	case s.MaybeFree:
		return fmt.Sprintf("held by %s until %s, or let go", s.Holder, msString(s.Lease))
	}
	return fmt.Sprintf("held by %s until %s", s.Holder, msString(s.Lease))
}

// leaseStep is the model's sequential specification.
func leaseStep(state, input, _ any) (bool, any) {
	s, in := state.(leaseState), input.(leaseInput)
	switch in.Kind {
	case leaseAcquire:
		// Legal when free, or when the holder's lease had passed by the
		// time the acquisition returned: some moment of its interval came
		// after the expiry.
		if s.Holder != "" && !s.MaybeFree && s.Lease > in.By {
			return false, s
		}
		return true, leaseState{Holder: in.Token, Lease: in.Lease}
	case leaseExtend:
		// Only the holder can extend, even after its lease passed (its key
		// may outlive the lower bound); the new PX replaces the old one.
		if s.Holder != in.Token {
			return false, s
		}
		return true, leaseState{Holder: in.Token, Lease: in.Lease}
	case leaseRelease:
		if s.Holder != in.Token {
			return false, s
		}
		return true, leaseState{}
	default: // leaseLetGo
		if s.Holder == in.Token {
			s.MaybeFree = true
		}
		return true, s
	}
}

// leaseModel is the porcupine model of one lock key, partitioned by key; it
// also serves porcupine.Visualize.
func leaseModel() porcupine.Model {
	seed := maphash.MakeSeed()
	return porcupine.Model{
		Partition:         partitionByKey,
		Init:              func() any { return leaseState{} },
		Step:              leaseStep,
		Equal:             func(a, b any) bool { return a.(leaseState) == b.(leaseState) },
		Hash:              func(state any) uint64 { return maphash.Comparable(seed, state.(leaseState)) },
		DescribeOperation: func(input, _ any) string { return describeLeaseInput(input.(leaseInput)) },
		DescribeState:     func(state any) string { return state.(leaseState).String() },
	}
}

func describeLeaseInput(in leaseInput) string {
	switch in.Kind {
	case leaseAcquire, leaseExtend:
		return fmt.Sprintf("%s %s (lease until %s)", in.Kind, in.Token, msString(in.Lease))
	}
	return fmt.Sprintf("%s %s", in.Kind, in.Token)
}

// partitionByKey splits the history by key, keys in order, so that
// describeLinearization can tell which partition is which key.
func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		k := o.Input.(leaseInput).Key
		byKey[k] = append(byKey[k], o)
	}
	parts := make([][]porcupine.Operation, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		parts = append(parts, byKey[k])
	}
	return parts
}

// leaseOperations turns the history into the operations that constrain the
// register. Each carries its index in ops as Metadata.
//
// Acquisitions that returned held, error or unknown are left out: the client
// does not rely on them, and they may or may not have taken effect (a nil
// can hide a rolled-back acquisition with no validity left, an unknown one
// may have succeeded after the client gave up). Modelling "maybe acquired"
// would only widen the search without constraining anyone else, because an
// acquisition that did take effect shows in the register only through a
// later OK of the same token. So where such a later OK exists (an extension
// or release of that token reported OK), the acquisition is put back in as
// one that took effect somewhere between its Call and that OK's Return;
// without it the OK would look like a non-holder's.
//
// Releases and extensions that did not return OK are kept, as leaseLetGo:
// the proxy rolls back a failed extension, and a release may have deleted
// the key without the client hearing so, so the next holder may legitimately
// acquire before the old lease ran out. Leaving them out would report that
// as a violation.
func leaseOperations(ops []op) []porcupine.Operation {
	type lockRef struct{ key, token string }
	proof := map[lockRef]op{} // the first extension or release reported OK
	for _, o := range ops {
		if o.Kind == opAcquire || o.Outcome != outOK {
			continue
		}
		ref := lockRef{o.Key, o.Token}
		if p, ok := proof[ref]; !ok || o.Call < p.Call {
			proof[ref] = o
		}
	}
	var out []porcupine.Operation
	for i, o := range ops {
		in := leaseInput{Key: o.Key, Token: o.Token}
		ret := o.Return
		switch {
		case o.Kind == opAcquire:
			if o.Outcome != outOK {
				p, ok := proof[lockRef{o.Key, o.Token}]
				if !ok {
					continue
				}
				ret = max(ret, p.Return)
			}
			in.Kind, in.Lease, in.By = leaseAcquire, o.Call+o.TTL-driftOf(o.TTL), ret
		case o.Outcome != outOK:
			in.Kind = leaseLetGo
		case o.Kind == opExtend:
			in.Kind, in.Lease = leaseExtend, o.Call+o.TTL-driftOf(o.TTL)
		default:
			in.Kind = leaseRelease
		}
		out = append(out, porcupine.Operation{
			ClientId: o.Client,
			Input:    in,
			Call:     int64(o.Call),
			Return:   int64(ret),
			Metadata: i,
		})
	}
	return out
}

// checkLinearizable asks porcupine whether the history's acquisitions,
// extensions and releases are linearizable against the lease-register
// model, partitioned by key. A timeout of 0 means no limit. porcupine.Unknown
// means it timed out: report it, it is neither a pass nor a violation. The
// LinearizationInfo serves describeLinearization and porcupine.Visualize
// (with leaseModel()).
func checkLinearizable(ops []op, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(leaseModel(), leaseOperations(ops), timeout)
}

// describeLinearization returns one line per key whose history porcupine
// could not linearize: how far the longest linearization got, the register
// after it, and the earliest operation it left out (where to start reading).
// It returns nil for porcupine.Ok and one line for porcupine.Unknown.
func describeLinearization(ops []op, res porcupine.CheckResult, info porcupine.LinearizationInfo) []string {
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []string{"linearizability unknown: porcupine timed out before deciding (neither a pass nor a violation)"}
	}
	parts := partitionByKey(leaseOperations(ops))
	partials := info.PartialLinearizationsOperations()
	var lines []string
	for i, part := range parts {
		var longest []porcupine.Operation
		if i < len(partials) {
			for _, p := range partials[i] {
				if len(p) > len(longest) {
					longest = p
				}
			}
		}
		if len(longest) == len(part) {
			continue
		}
		var state any = leaseState{}
		placed := map[int]bool{}
		for _, o := range longest {
			_, state = leaseStep(state, o.Input, nil)
			placed[o.Metadata.(int)] = true
		}
		var next *op
		for _, o := range part {
			if j := o.Metadata.(int); !placed[j] && (next == nil || ops[j].Call < next.Call) {
				next = &ops[j]
			}
		}
		key := part[0].Input.(leaseInput).Key
		lines = append(lines, fmt.Sprintf("key %q: only %d of %d operations linearize; the lock is then %s, and the earliest left out is %s",
			key, len(longest), len(part), state, describeOp(*next)))
	}
	return lines
}

// describeOp is one recorded operation in a report line.
func describeOp(o op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s by client %d [%s, %s] -> %s",
		[...]string{"acquire", "extend", "release"}[o.Kind], o.Token, o.Client,
		msString(o.Call), msString(o.Return), [...]string{"ok", "held", "error", "unknown"}[o.Outcome])
	if o.Kind != opRelease {
		fmt.Fprintf(&b, " (TTL %s)", o.TTL)
	}
	return b.String()
}

// msString formats a point or span of the history clock in milliseconds.
func msString(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// checkFences checks the fencing tokens: a grant's token must be above the
// token of every grant of the same key that returned before it was asked
// for (in real time, across clients and proxies). It returns what breaks
// that; a grant without a token is one too.
func checkFences(ops []op) []string {
	byKey := map[string][]op{}
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			byKey[o.Key] = append(byKey[o.Key], o)
		}
	}
	var found []string
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		grants := byKey[key]
		slices.SortFunc(grants, func(a, b op) int { return cmp.Compare(a.Return, b.Return) })
		for _, b := range grants {
			if b.Fence <= 0 {
				found = append(found, fmt.Sprintf("key %q: token %s was granted without a fencing token", key, b.Token))
				continue
			}
			for _, a := range grants {
				if a.Return >= b.Call {
					break // sorted by Return: the rest did not return before b was asked for
				}
				if a.Fence >= b.Fence {
					found = append(found, fmt.Sprintf("key %q: %s got fencing token %d at %.1fms, not above %d of %s granted at %.1fms",
						key, b.Token, b.Fence, millis(b.Return), a.Fence, a.Token, millis(a.Return)))
				}
			}
		}
	}
	return found
}

// millis shows a history time in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
