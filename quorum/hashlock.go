package quorum

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Hash locks are Redisson's RLock: a hash whose one field, the owner's
// ("<uuid>:<threadId>"), counts the owner's holds, re-entries included,
// with a lease as the hash's TTL. The engine runs its own scripts for them
// (lua/hash_*.lua), never the client's, and decides each operation by the
// rule of rule.go. The counts of one lock may differ between backends (a
// backend that missed a re-entry counts one less), so a release decides
// by how many backends still hold the field after it, not by any one
// count.

// ownFieldPrefix starts every field the engine keeps in a hash lock
// beside the owner's: no request may name an owner's field that starts
// with it (reservedField), so that none of them is taken for an owner, or
// renewed, released or read as one. The scripts write it as "\0".
const ownFieldPrefix = "\x00"

// attemptPrefix starts the field in which an acquisition records its
// attempt beside the owner's field (lua/hash_acquire.lua).
const attemptPrefix = ownFieldPrefix + "attempt:"

// reservedField reports whether an owner's field names one of the
// engine's own.
func reservedField(field string) bool { return strings.HasPrefix(field, ownFieldPrefix) }

// attemptIDBytes is the size of an acquisition attempt's id, random: two
// attempts share one with negligible probability.
const attemptIDBytes = 16

// fenceField is the field in which a hash lock keeps its fencing token
// (lua/hash_acquire_fenced.lua), when the engine has Fencing.
const fenceField = ownFieldPrefix + "fence"

// hashAcquire takes the hash lock key for the owner's field, or re-enters
// it where the owner holds it, and gives the hash a TTL of lease. It
// returns the lock's validity as acquire does, and fails as acquire does
// (ErrNotAcquired, a *NoQuorumError, a *TTLError), with Result.HolderTTL
// set when a backend that refused told how long its holder has left.
//
// A failed attempt is rolled back on every backend that may have counted
// it, those that did not answer in time included: each attempt records
// its id beside the owner's field (lua/hash_acquire.lua), and the undo
// takes back one hold only where that record is still this attempt's
// (lua/hash_undo.lua). The count alone could not tell a first acquisition,
// whose undo deletes the field, from a re-entry, whose undo must leave the
// owner's earlier holds; nor a late reply of this attempt from a later
// attempt's increment.
//
// With Fencing, Result.Fence is the lock's fencing token, minted as an
// acquire's is (fence.go) and kept in the hash (fenceField): a first hold
// mints it, and a re-entry answers the one the lock has, so that the
// owner's code holds one token for the whole nested hold. Where some
// backends took the lock afresh on a re-entry (it had lapsed there), it
// gets the largest token of its voters, as extendOrAcquire's lock does.
func (e *Engine) hashAcquire(ctx context.Context, key, field string, lease time.Duration) (Result, error) {
	if err := e.checkTTL(lease); err != nil {
		return Result{}, err
	}
	attempt := newAttemptID()
	keys := []string{key}
	var holder leastTTL
	op := lockOp{
		keys:    keys,
		token:   field,
		ttl:     lease,
		refused: ErrNotAcquired,
		undo:    func(ctx context.Context, n *node, _ ack) { n.run(ctx, hashUndoScript, keys, field, attempt) },
	}
	if e.cfg.Fencing {
		op.fenced, op.raise = true, hashFenceRaiseScript
		op.cmd = e.checkedCommand(hashAcquireFencedScript, withCounter(keys), field, lease.Milliseconds(), attempt, backend.Blank(fenceWidth))
		op.decode = func(_ *node, r backend.Reply) (ack, error) {
			v, pttl, err := decodeHashFenced(r)
			holder.note(pttl)
			return v, err
		}
	} else {
		op.cmd = e.checkedCommand(hashAcquireScript, keys, field, lease.Milliseconds(), attempt)
		op.decode = decodeHashGrant(&holder)
	}
	op.copies = copyHash
	res, err := e.lockOp(ctx, op)
	if err != nil {
		res.HolderTTL = holder.get()
	}
	return res, err
}

// newAttemptID is a new acquisition attempt's id, which its rollback
// matches.
func newAttemptID() string {
	id := make([]byte, attemptIDBytes)
	rand.Read(id)
	return hex.EncodeToString(id)
}

// decodeHashGrant reads an acquisition's answer, {1, count} granted or
// {0, PTTL} refused, noting the refusing holder's PTTL in holder.
func decodeHashGrant(holder *leastTTL) func(*node, backend.Reply) (ack, error) {
	return func(_ *node, r backend.Reply) (ack, error) {
		granted, n, err := pairOfIntegers(r)
		if err == nil && granted == 0 {
			holder.note(heldFor(n))
		}
		return ack{yes: granted == 1, fresh: granted == 1, count: n}, err
	}
}

// decodeHashFenced reads the answer of lua/hash_acquire_fenced.lua: {1,
// count, token} when the backend counted the hold, fresh when it was the
// first there (it minted); {0, PTTL} when not, the PTTL returned apart
// (0 otherwise).
func decodeHashFenced(r backend.Reply) (ack, time.Duration, error) {
	a, err := r.Array()
	if err == nil && len(a) != 2 && len(a) != 3 {
		err = errors.New("quorum: script: unexpected reply")
	}
	if err != nil {
		return ack{}, 0, err
	}
	granted, err := a[0].Integer()
	n, nErr := a[1].Integer()
	switch err = cmp.Or(err, nErr); {
	case err != nil:
		return ack{}, 0, err
	case granted == 0:
		return ack{}, heldFor(n), nil
	case granted != 1 || len(a) != 3:
		return ack{}, 0, errors.New("quorum: script: unexpected reply")
	}
	text, err := a[2].Bulk()
	if err != nil {
		return ack{}, 0, err
	}
	fence, err := strconv.ParseInt(text, 10, 64)
	if err != nil || fence <= 0 {
		return ack{}, 0, fmt.Errorf("acquisition answered %q, not a token", text)
	}
	return ack{yes: true, fresh: n == 1, count: n, fence: fence}, 0, nil
}

// heldFor is the lease left to a holder whose key answered PTTL pttl (ms).
// A PTTL of 0 is a lease that ends within this millisecond, not none: a
// contender that Redisson wakes at the holder's PTTL arrives just then,
// and finds it gone on some backends and not yet on others, a split for
// which it must be told to wait, not fail. -1 (no TTL) stays no lease.
func heldFor(pttl int64) time.Duration {
	if pttl == 0 {
		return time.Millisecond
	}
	return time.Duration(pttl) * time.Millisecond
}

// leastTTL is the least positive TTL noted, 0 for none; safe for
// concurrent use, as votes are decoded on the backends' goroutines.
type leastTTL struct {
	mu    sync.Mutex
	least time.Duration
}

func (l *leastTTL) note(ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ttl > 0 && (l.least == 0 || ttl < l.least) {
		l.least = ttl
	}
}

func (l *leastTTL) get() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.least
}

// What one backend's hash_release.lua did.
const (
	leftNotOwner = 0 // the field was not there
	leftHeld     = 1 // the owner still holds it, with count
	leftReleased = 2 // the lock went
)

type hashLeft struct {
	kind  int64
	count int64
}

func decodeHashRelease(_ *node, r backend.Reply) (hashLeft, error) {
	kind, count, err := pairOfIntegers(r)
	if err == nil && (kind < leftNotOwner || kind > leftReleased) {
		err = errors.New("quorum: script: unexpected reply")
	}
	return hashLeft{kind: kind, count: count}, err
}

// hashRelease leaves the hash lock key once for the owner's field: each
// backend takes one hold off the field's count, and deletes the hash at
// the last (lua/hash_release.lua). With a latch, each backend records what
// it did there for latchTTL, and a retry of the same request answers that
// again rather than taking a second hold off.
//
// The backends' counts may differ, so the outcome is decided by how many
// of them still hold the field after this release, by the rule of
// rule.go:
//   - still held (Result.HoldCount, the count a quorum has at least) when a
//     quorum still holds it: the owner holds the lock;
//   - released (Result.Released) when a quorum had the field (released or
//     still held) and those still holding it, with every backend that did
//     not answer, cannot make a quorum: no quorum can hold it any more, so
//     the owner's last hold is gone. The backends that still hold it had
//     missed a re-entry, and their field is deleted too (lua/hash_drop.lua),
//     so that the lock is free for others at once rather than at the end
//     of its lease: before hashRelease returns where they answered, as soon
//     as they answer where they had not;
//   - ErrNotHeld when the backends that had the field, with those that did
//     not answer, cannot make a quorum: the lock is not the owner's;
//   - ErrNotHeld too, once every answer that will come is in, when those
//     still holding the field, with the silent backends, cannot make a
//     quorum, though the silent ones might have made one that had it: no
//     quorum holds the lock now, whether this release ended it or it was
//     gone before, and "not held" is the answer that claims nothing;
//   - otherwise a *NoQuorumError: Redisson retries the request with the
//     same latch, which each backend that did its part answers as it did.
//
// A *TTLError for a lease outside (0, MaxTTL], or a latch without a
// positive latchTTL.
func (e *Engine) hashRelease(ctx context.Context, key, field string, lease time.Duration, latch string, latchTTL time.Duration) (Result, error) {
	if err := e.checkTTL(lease); err != nil {
		return Result{}, err
	}
	keys, err := e.releaseKeys(key, latch, latchTTL)
	if err != nil {
		return Result{}, err
	}
	id := newReleaseID()
	f := fanout(e, e.checkedCommand(hashReleaseScript, keys, field, lease.Milliseconds(), latchTTL.Milliseconds(), id), decodeHashRelease)
	r := e.collectRelease(ctx, f)
	switch r.final() {
	case stillHeld:
		return Result{HoldCount: r.holdCount()}, nil
	case lockReleased:
		e.dropHeld(ctx, keys[:1], field, r.held, f, r.total-r.heard, func(ctx context.Context, n *node, count int64) {
			n.run(ctx, hashDropScript, keys, field, strconv.FormatInt(count, 10), id, latchTTL.Milliseconds())
		})
		e.released(key, id)
		return Result{Released: true}, nil
	case notOwned:
		return Result{}, ErrNotHeld
	}
	return Result{}, cut(ctx, r.noQuorum())
}

// releaseKeys are a release's keys: the lock's, then its latch's where
// it has one, which needs a positive latchTTL.
func (e *Engine) releaseKeys(key, latch string, latchTTL time.Duration) ([]string, error) {
	if latch == "" {
		return []string{key}, nil
	}
	if latchTTL <= 0 {
		return nil, &TTLError{TTL: latchTTL, Max: e.cfg.MaxTTL}
	}
	return []string{key, latch}, nil
}

// releaseVotes are the answers to a hash lock's release (hashRelease,
// rwRelease), read until its outcome is decided.
type releaseVotes struct {
	releaseTally
	held     []vote[hashLeft] // the backends that still hold the field
	failures []*NodeError
	heard    int
	// went and noLock count the read-write lock's answers (rwRelease):
	// released and the whole lock gone; no read-write lock there at all.
	went, noLock int
}

// collectRelease reads f's answers while its outcome is undecided, by
// hashRelease's rule.
func (e *Engine) collectRelease(ctx context.Context, f *flight[hashLeft]) releaseVotes {
	r := releaseVotes{releaseTally: releaseTally{total: len(e.nodes), quorum: e.quorum}}
	if !f.waitFor(ctx, decisive(r.total, r.quorum)) {
		return r
	}
	for r.heard < r.total && r.outcome() == undecidedRelease {
		v, ok := f.next(ctx)
		if !ok {
			break
		}
		r.heard++
		switch {
		case v.err != nil:
			r.failures = append(r.failures, v.err.(*NodeError))
		case v.val.kind == leftHeld:
			r.held = append(r.held, v)
			r.releaseTally.held++
		case v.val.kind == leftReleased, v.val.kind == leftWent:
			r.released++
			if v.val.kind == leftWent {
				r.went++
			}
		default:
			r.notOwner++
			if v.val.kind == leftNoLock {
				r.noLock++
			}
		}
	}
	return r
}

// holdCount is the count a quorum of the backends still holding the
// field has at least.
func (r releaseVotes) holdCount() int64 {
	counts := make([]int64, len(r.held))
	for i, v := range r.held {
		counts[i] = v.val.count
	}
	slices.SortFunc(counts, func(a, b int64) int { return cmp.Compare(b, a) })
	return counts[r.quorum-1]
}

func (r releaseVotes) noQuorum() *NoQuorumError {
	t := r.releaseTally
	return &NoQuorumError{Counted: t.released + t.notOwner + t.held, Agreed: t.held, Needed: t.quorum, Total: t.total, Nodes: r.failures, Split: t.split()}
}

// split says what the answers were, for a release left undecided: which
// of them released, still hold, or never held the owner's field.
func (t releaseTally) split() string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{t.released, "released by"}, {t.held, "still held by"}, {t.notOwner, "not held by"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p.what, p.n))
		}
	}
	return strings.Join(parts, ", ")
}

// releaseTally counts the answers to a hash lock release; the backends
// that gave none that counts, or none yet, are silent.
type releaseTally struct {
	total, quorum            int
	released, held, notOwner int
}

// The outcomes of a hash lock release.
const (
	undecidedRelease = iota
	stillHeld
	lockReleased
	notOwned
)

// outcome is the release's outcome by hashRelease's rule. Each outcome,
// once reached, stays as more answers come: a silent backend's answer
// only moves it from silent to one side.
func (t releaseTally) outcome() int {
	silent := t.total - t.released - t.held - t.notOwner
	switch {
	case t.held >= t.quorum:
		return stillHeld
	case t.released+t.held >= t.quorum && t.held+silent < t.quorum:
		return lockReleased
	case t.released+t.held+silent < t.quorum:
		return notOwned
	}
	return undecidedRelease
}

// final is the outcome once no more answers will come (each backend
// answered, failed, or the caller stopped waiting): undecided only while
// the silent backends, with those still holding the field, could make a
// quorum that still holds it.
func (t releaseTally) final() int {
	silent := t.total - t.released - t.held - t.notOwner
	if o := t.outcome(); o != undecidedRelease || t.held+silent >= t.quorum {
		return o
	}
	return notOwned
}

// dropHeld ends the owner's hold where it is still held after a release
// that a quorum decided was its last: drop runs on the backends of held,
// before dropHeld returns (within a backend timeout), and on the pending
// backends still to answer the release, as soon as they do, each with the
// count it answered. It keeps the owner's next acquisition through this
// engine waiting until it is done, as a rollback does (rollbacks.go), so
// that it never ends a hold taken after the release; the drop scripts
// (lua/hash_drop.lua, lua/rw_drop.lua) end only the count the backend
// answered the release with, for a hold taken through another engine.
func (e *Engine) dropHeld(ctx context.Context, keys []string, field string, held []vote[hashLeft], f *flight[hashLeft], pending int, drop func(ctx context.Context, n *node, count int64)) {
	if len(held) == 0 && pending == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeouts*e.cfg.NodeTimeout)
	end := e.rollbacks.start(keys, field)
	dropHold := func(v vote[hashLeft]) {
		if v.err == nil && v.val.kind == leftHeld {
			drop(ctx, e.nodes[v.node], v.val.count)
		}
	}
	var now, later sync.WaitGroup
	for _, v := range held {
		now.Go(func() { dropHold(v) })
	}
	for range pending {
		later.Go(func() { dropHold(<-f.votes) })
	}
	e.awaitCleanup(&now, &later, cancel, end)
}

// readField looks at the owner's field of the hash lock key on every
// backend: a view that exists, with the count as its value, where the
// field is there.
func (e *Engine) readField(ctx context.Context, key, field string) views {
	return e.readWith(ctx, backend.ScriptCommand(hashFieldScript, []string{key}, field), func(_ *node, r backend.Reply) (keyState, error) {
		if r.IsNil() {
			return keyState{}, nil
		}
		text, err := r.Bulk()
		if err == nil {
			_, err = strconv.ParseInt(text, 10, 64)
		}
		return keyState{exists: true, hasValue: true, value: text}, err
	})
}

// hashExists reports whether a quorum of backends has the owner's field
// in the hash lock key. It returns a *NoQuorumError when fewer do and the
// backends that did not answer could make them a quorum.
func (e *Engine) hashExists(ctx context.Context, key, field string) (bool, error) {
	return e.onQuorum(e.readField(ctx, key, field))
}

// hashFence answers the fencing token of the hash lock key as the owner's
// field holds it, or, for the field "", as whichever one owner holds it:
// the token a quorum of its holders carry (lua/hash_fence_read.lua). Its
// errors are fence's: ErrNotHeld, ErrNoFence, a *NoQuorumError.
func (e *Engine) hashFence(ctx context.Context, key, field string) (int64, error) {
	return e.quorumFence(ctx, backend.ScriptCommand(hashFenceReadScript, []string{key}, field))
}

// hashCount returns how many holds the owner's field counts on a quorum:
// the quorum-th largest count among the backends that have it, which a
// quorum has at least (the backends that did not answer can only add
// larger ones). It returns ErrNotFound when fewer than a quorum have the
// field and the backends that did not answer could not make one, and a
// *NoQuorumError when they could.
func (e *Engine) hashCount(ctx context.Context, key, field string) (int64, error) {
	v := e.readField(ctx, key, field)
	var counts []int64
	for _, s := range v.states {
		if s.exists {
			n, _ := strconv.ParseInt(s.value, 10, 64) // readField parsed it
			counts = append(counts, n)
		}
	}
	if len(counts) < e.quorum {
		if err := e.undecided(v, len(counts)); err != nil {
			return 0, err
		}
		return 0, ErrNotFound
	}
	slices.SortFunc(counts, func(a, b int64) int { return cmp.Compare(b, a) })
	return counts[e.quorum-1], nil
}

// hashPTTL returns how long a quorum still has key, whatever its type (a
// hash lock's lease), as pttl does for a value: the quorum-th longest PTTL
// less the drift allowance. It returns ErrNotFound when the key is not on
// a quorum (or too little time is left), ErrNoExpiry when a quorum has it
// without expiry, and a *NoQuorumError when the backends that did not
// answer could make either untrue.
func (e *Engine) hashPTTL(ctx context.Context, key string) (time.Duration, error) {
	return e.presentTTL(e.read(ctx, key))
}

// presentTTL is how long a quorum of the backends v looked at still has
// the key, whatever its value or type, as hashPTTL says.
func (e *Engine) presentTTL(v views) (time.Duration, error) {
	var present []keyState
	for _, s := range v.states {
		if s.exists {
			present = append(present, s)
		}
	}
	if len(present) < e.quorum {
		if err := e.undecided(v, len(present)); err != nil {
			return 0, err
		}
		return 0, ErrNotFound
	}
	return e.quorumTTL(v, present)
}
