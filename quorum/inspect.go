package quorum

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// presentScript is not among the scripts loaded on every connection, as
// valueScripts.inspect is not.
var presentScript = luaScript("present")

// List asks for one page of a listing of the keys the backends hold, for
// an operator: which locks are held, by whom, for how long, and where.
type List struct {
	// Cursor is 0 to start a listing, else the Cursor of the page before.
	Cursor uint64
	// Prefix, when set, lists only the keys that start with it (a user's
	// key prefix). Default: none.
	Prefix string
	// Match is a Redis glob pattern (SCAN's MATCH) that a key's part after
	// Prefix must match. Default: "*".
	Match string
	// Count is how many keys a page looks at, about: the listing asks
	// each backend's SCAN for that many, and stops once it has that many
	// keys. At most MaxListCount. Default: 10.
	Count int
}

// MaxListCount bounds List.Count: a page reads its keys on every backend
// in one script each, which no backend timeout should have to wait for.
const MaxListCount = 1000

// listRounds bounds the SCAN calls of one page: a page whose SCANs find
// only keys listed already (or none that match) ends after that many, with
// fewer keys than Count, as SCAN's own pages may.
const listRounds = 4

// Listing is one page of a listing.
type Listing struct {
	// Cursor is the cursor of the next page; 0 when the listing is done.
	Cursor uint64
	// Locks are the keys of this page, in no particular order.
	Locks []HeldLock
	// Skipped are the addresses of the backends whose SCAN did not answer
	// on this page: the keys that only they hold are not listed.
	Skipped []string
}

// HeldLock is one key of a listing, as the backends hold it.
type HeldLock struct {
	Key string
	// Owner is the value (the lock's token) a quorum of the backends that
	// count holds; "" when none does.
	Owner string
	// Held says Owner holds the key: a quorum holds it with time left, as
	// PTTL would answer. False when no value has a quorum, or too little
	// time is left to count on.
	Held bool
	// Validity is how long Owner stays held on a quorum, less the drift
	// allowance, computed as PTTL computes it; 0 when not Held or NoExpiry.
	Validity time.Duration
	// NoExpiry says Owner holds the key on a quorum without expiry.
	NoExpiry bool
	// Undecided says the backends that did not answer (or do not count)
	// could change Held: it is no answer, as PTTL's NOQUORUM is none.
	Undecided bool
	// Backends are the key as each backend holds it, in configuration
	// order.
	Backends []KeyPresence
}

// KeyPresence is one backend's view of a key.
type KeyPresence struct {
	Addr string
	// Err is why the backend's view does not count toward a quorum (a
	// *NodeError: no answer, quarantine, ...); nil when it counts.
	Err error
	// Seen says the backend answered, so that what follows is what it
	// holds, whether it counts or not.
	Seen bool
	// Exists says the key is there; HasValue that it is a string, whose
	// value is Value.
	Exists, HasValue bool
	Value            string
	// TTL is the key's remaining time to live on this backend, as its own
	// PTTL gives it; NoExpiry when it has none.
	TTL      time.Duration
	NoExpiry bool
}

// State names whether h is held: "held", "not_held", or "undecided" when
// the backends that did not answer could change that (where PTTL would
// answer NOQUORUM).
func (h *HeldLock) State() string {
	switch {
	case h.Undecided:
		return "undecided"
	case h.Held:
		return "held"
	}
	return "not_held"
}

// PTTL is h's validity in milliseconds, as PTTL answers for the value
// held: -1 when held without expiry, -2 when not held.
func (h *HeldLock) PTTL() int64 {
	switch {
	case h.Held && h.NoExpiry:
		return -1
	case h.Held:
		return h.Validity.Milliseconds()
	}
	return -2
}

// PTTL is the key's TTL on the backend in milliseconds, as the backend's
// own PTTL answers (-1 without expiry, -2 absent); false when the backend
// was not Seen.
func (p *KeyPresence) PTTL() (int64, bool) {
	switch {
	case !p.Seen:
		return 0, false
	case !p.Exists:
		return -2, true
	case p.NoExpiry:
		return -1, true
	}
	return p.TTL.Milliseconds(), true
}

// Kind is why the backend's view does not count toward a quorum, as
// NodeError.Kind names it ("timeout", "quarantined", ...); "" when it
// counts.
func (p *KeyPresence) Kind() string {
	var ne *NodeError
	switch {
	case p.Err == nil:
		return ""
	case errors.As(p.Err, &ne):
		return ne.Kind()
	}
	return KindError
}

// ErrListCursor is the failure of a List whose page ended with a backend
// SCAN cursor too large to number with the backend's index; no Redis gives
// one, as their cursors stay below their key tables' sizes.
var ErrListCursor = errors.New("quorum: backend scan cursor out of range")

// List returns one page of a listing of the keys held on the backends,
// never the engine's own (ReservedPrefix), with, for each, its owner and
// validity as the engine computes them and what each backend holds. It
// reads each backend's keys with SCAN, never KEYS: a page costs each backend
// at most twice listRounds scripts and the backend it scans listRounds
// SCANs of Count, whatever the number of keys.
//
// A listing scans backend 0 to its end, then backend 1, and so on; the
// cursor numbers the backend and its SCAN cursor. A key found on a backend
// is listed only when no backend before it holds it, so that a key held on
// several backends is listed once. The guarantees are SCAN's, per key: a
// key that stays on the same backends from the first page to the last,
// all of them answering, is listed once (twice only where SCAN itself
// returns it twice, during a rehash); a key that came to or left one of
// its backends during the listing may be listed twice or not at all, and
// so may one held on a backend that did not answer. A listing is a view
// for operators, not a snapshot.
//
// What ctx bounds: the wait for each backend's reply, beside the backend
// timeout. A backend whose SCAN fails is skipped (Listing.Skipped); List
// fails only when ctx ends, or with ErrListCursor.
func (e *Engine) List(ctx context.Context, req List) (Listing, error) {
	count := req.Count
	switch {
	case count <= 0:
		count = 10
	case count > MaxListCount:
		count = MaxListCount
	}
	match := req.Match
	if match == "" {
		match = "*"
	}
	pattern := globEscape(req.Prefix) + match
	n := uint64(len(e.nodes))
	i, cursor := int(req.Cursor%n), req.Cursor/n
	var out Listing
	for round := 0; round < listRounds && len(out.Locks) < count; round++ {
		keys, next, err := e.scan(ctx, e.nodes[i], cursor, pattern, count-len(out.Locks))
		if err != nil {
			if ctx.Err() != nil {
				return Listing{}, errors.Join(err, ctx.Err())
			}
			out.Skipped = append(out.Skipped, e.nodes[i].addr)
			next = 0
		}
		var mine []string
		for _, k := range keys {
			if strings.HasPrefix(k, req.Prefix) && !reserved(k) {
				mine = append(mine, k)
			}
		}
		mine = e.notHeldBefore(ctx, i, mine)
		if len(mine) > 0 {
			out.Locks = append(out.Locks, e.inspect(ctx, i, mine)...)
		}
		if cursor = next; cursor == 0 {
			if i++; i == len(e.nodes) {
				return out, nil // Cursor 0: done
			}
		}
	}
	if cursor > (math.MaxUint64-uint64(i))/n {
		return Listing{}, ErrListCursor
	}
	out.Cursor = cursor*n + uint64(i)
	return out, nil
}

// scan runs one SCAN on n and returns the keys it found and its next
// cursor.
func (e *Engine) scan(ctx context.Context, n *node, cursor uint64, pattern string, count int) ([]string, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.NodeTimeout)
	defer cancel()
	r, err := n.pipe.Do(ctx, backend.KeylessCommand("SCAN", strconv.FormatUint(cursor, 10), "MATCH", pattern, "COUNT", count))
	if err != nil {
		return nil, 0, err
	}
	pair, err := r.Array()
	if err != nil || len(pair) != 2 {
		return nil, 0, errors.New("quorum: unexpected scan reply")
	}
	next, err := pair[0].Bulk()
	if err != nil {
		return nil, 0, errors.New("quorum: unexpected scan cursor")
	}
	c, err := strconv.ParseUint(next, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("quorum: unexpected scan cursor %q", next)
	}
	elems, err := pair[1].Array()
	if err != nil {
		return nil, 0, errors.New("quorum: unexpected scan keys")
	}
	keys := make([]string, 0, len(elems))
	for _, el := range elems {
		k, err := el.Bulk()
		if err != nil {
			return nil, 0, errors.New("quorum: unexpected scan key")
		}
		keys = append(keys, k)
	}
	return keys, c, nil
}

// notHeldBefore returns the keys, found by scanning backend from, that no
// backend before it holds, asking those in one short script each: they
// were listed there already, and reading them on every backend again
// would make a listing over N backends cost N times the reads of one.
// A backend that does not answer may hold any of them.
func (e *Engine) notHeldBefore(ctx context.Context, from int, keys []string) []string {
	if from == 0 || len(keys) == 0 {
		return keys
	}
	held := make([]string, from)
	var wg sync.WaitGroup
	for i, n := range e.nodes[:from] {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, e.cfg.NodeTimeout)
			defer cancel()
			r, err := n.pipe.Do(ctx, backend.ScriptCommand(presentScript, keys))
			if err != nil {
				return
			}
			if bits, err := r.Bulk(); err == nil && len(bits) == len(keys) {
				held[i] = bits
			}
		})
	}
	wg.Wait()
	out := keys[:0:0]
	for k, key := range keys {
		if !slices.ContainsFunc(held, func(bits string) bool { return bits != "" && bits[k] == '1' }) {
			out = append(out, key)
		}
	}
	return out
}

// inspect reads keys, found by scanning backend from, on every backend in
// one script each, and returns those that no backend before from holds,
// each once.
func (e *Engine) inspect(ctx context.Context, from int, keys []string) []HeldLock {
	f := fanoutKeeping(e, backend.ScriptCommand(e.values.inspect, keys), func(n *node, r backend.Reply) ([]keyState, error) {
		elems, err := r.Array()
		if err != nil || len(elems) != len(keys) {
			return nil, errors.New("quorum: unexpected inspect reply")
		}
		states := make([]keyState, len(elems))
		for i, el := range elems {
			if states[i], err = parseKeyState(n, el); err != nil {
				return nil, err
			}
		}
		return states, nil
	})
	votes := collectAll(ctx, f, len(e.nodes))
	// A vote that does not count (a quarantined backend's, say) still
	// carries what the backend holds when its reply was read.
	seen := make([][]keyState, len(e.nodes))
	errs := make([]*NodeError, len(e.nodes))
	var failures []*NodeError
	for _, vt := range votes {
		seen[vt.node] = vt.val
		if vt.err != nil {
			errs[vt.node] = vt.err.(*NodeError)
			failures = append(failures, errs[vt.node])
		}
	}
	unheard := len(e.nodes) - len(votes)
	out := make([]HeldLock, 0, len(keys))
	listed := make(map[string]bool, len(keys))
	for k, key := range keys {
		if listed[key] || heldBefore(seen[:from], k) {
			continue
		}
		listed[key] = true
		v := views{ctx: ctx, failures: failures, unheard: unheard}
		h := HeldLock{Key: key, Backends: make([]KeyPresence, len(e.nodes))}
		for i, n := range e.nodes {
			p := &h.Backends[i]
			p.Addr = n.addr
			if errs[i] != nil {
				p.Err = errs[i]
			} else if seen[i] == nil {
				p.Err = &NodeError{Node: i, Addr: n.addr, Err: errNoReply}
			}
			if seen[i] == nil {
				continue
			}
			s := seen[i][k]
			p.Seen, p.Exists, p.HasValue, p.Value = true, s.exists, s.hasValue, s.value
			if p.NoExpiry = s.pttl == math.MaxInt64; !p.NoExpiry {
				p.TTL = s.pttl
			}
			if p.Err == nil {
				v.states = append(v.states, s)
			}
		}
		e.judge(v, &h)
		out = append(out, h)
	}
	return out
}

// heldBefore reports whether any of the backends' views (nil: no answer)
// has key k. A backend that did not answer may hold it; the key is listed
// then, as SCAN may list a key twice but must not miss one.
func heldBefore(views [][]keyState, k int) bool {
	for _, v := range views {
		if v != nil && v[k].exists {
			return true
		}
	}
	return false
}

// judge sets h's owner and validity from v, the views that count, by the
// rules of GET and PTTL.
func (e *Engine) judge(v views, h *HeldLock) {
	holders := mostHeld(v.states)
	if len(holders) < e.quorum {
		h.Undecided = e.undecided(v, len(holders)) != nil
		return
	}
	h.Owner = holders[0].value
	left, err := e.quorumTTL(v, holders)
	switch {
	case err == nil:
		h.Held, h.Validity = true, left
	case errors.Is(err, ErrNoExpiry):
		h.Held, h.NoExpiry = true, true
	case errors.Is(err, ErrNoQuorum):
		h.Undecided = true
	}
}

// globEscape quotes s for a Redis glob pattern, so that a prefix matches
// only itself.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
