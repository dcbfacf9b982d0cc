package quorum

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// acquire takes key for token on a quorum of backends with SET NX PX ttl.
// It returns the lock's validity in Result. It returns ErrNotAcquired when
// another token holds the key where the backends that answered are too many
// for the others to make a quorum, or no validity was left; a
// *NoQuorumError when the backends that did not answer could have decided
// it; and a *TTLError for a TTL outside (0, MaxTTL]. On any failure the key
// is rolled back everywhere the token may have been set.
func (e *Engine) acquire(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	if err := e.checkTTL(ttl); err != nil {
		return Result{}, err
	}
	op := lockOp{
		keys:    []string{key},
		token:   token,
		ttl:     ttl,
		refused: ErrNotAcquired,
		undo: func(ctx context.Context, n *node, v ack) {
			// A yes voter is rolled back for exactly this acquisition: a
			// retry with the same token, through this proxy or another,
			// keeps its holding. Its fencing token tells them apart where
			// it has one (a retry mints more), else the key's expiry.
			switch {
			case !v.yes:
				n.release(ctx, key, token)
			case e.cfg.Fencing:
				n.run(ctx, releaseFencedScript, []string{key}, token, fenceText(v.fence))
			default:
				n.run(ctx, releaseStampedScript, []string{key}, token, v.stamp)
			}
		},
	}
	if e.cfg.Fencing {
		op.fenced = true
		op.cmd = e.checkedCommand(acquireFencedScript, []string{key, fenceCounterKey},
			token, ttl.Milliseconds(), backend.Blank(fenceWidth))
		op.decode = decodeFenced
	} else {
		op.cmd = e.checkedCommand(acquireScript, []string{key}, token, ttl.Milliseconds())
		op.decode = decodeStamp
	}
	op.copies = copyValue
	return e.lockOp(ctx, op)
}

// decodeStamp reads the answer of lua/acquire.lua: the key's expiry when
// it was set, 0 when not.
func decodeStamp(_ *node, r backend.Reply) (ack, error) {
	stamp, err := r.Integer()
	return ack{yes: stamp > 0, fresh: stamp > 0, stamp: stamp}, err
}

// decodeFenced reads the answer of lua/acquire_fenced.lua: the token it
// minted when the key was set, as text, 0 when not.
func decodeFenced(_ *node, r backend.Reply) (ack, error) {
	done, fence, err := fenceAnswer(r, "acquisition")
	if err == nil && done && fence == 0 {
		err = errors.New(`acquisition answered "", not a token`)
	}
	return ack{yes: err == nil && done, fresh: err == nil && done, fence: fence}, err
}

// fenceAnswer reads a script's answer that is 0 when it did nothing, and
// otherwise the lock's fencing token as text, "" for a lock without one.
func fenceAnswer(r backend.Reply, what string) (done bool, fence int64, err error) {
	if r.IsInteger() {
		none, err := r.Integer()
		if none != 0 {
			err = fmt.Errorf("%s answered %d, not a token", what, none)
		}
		return false, 0, err
	}
	text, err := r.Bulk()
	if err != nil || text == "" {
		return err == nil, 0, err
	}
	fence, err = strconv.ParseInt(text, 10, 64)
	if err != nil || fence <= 0 {
		return false, 0, fmt.Errorf("%s answered %q, not a token", what, text)
	}
	return true, fence, nil
}

// lockOp is an acquisition or extension: it holds with a quorum of yes
// votes and positive validity, and is rolled back otherwise.
type lockOp struct {
	// keys and token are what the operation takes or extends.
	keys  []string
	token string
	// cmd is the script command; with fenced, its Blank argument is the
	// clock value that the acquisition mints at least (sendClocked).
	cmd    *backend.Command
	decode func(n *node, r backend.Reply) (ack, error)
	// undo rolls the operation back on one backend, given its answer (the
	// zero ack when it gave none): compare-and-delete.
	undo func(ctx context.Context, n *node, v ack)
	// ttl is the lock's TTL; zero when each yes voter reports its own.
	ttl     time.Duration
	refused error
	// renews is set when the token may already hold the keys (an
	// extension): an undecided outcome then undoes only what the operation
	// newly took (ack.fresh), since the holder's lock may still be valid on
	// a quorum that counts the backends that did not answer.
	renews bool
	// fenced is set when the yes voters minted a fencing token (ack.fence)
	// that a quorum of them must agree on before the lock is granted.
	fenced bool
	// raise writes the lock's fencing token back to a yes voter that
	// carries less (settleFence), run with the keys and counter
	// (withCounter), the token and the lock's token as text. nil:
	// lua/fence_raise.lua, whose locks carry the token in their values.
	raise *backend.Script
	// scriptKeys are the keys of scriptOp's command, when more than keys
	// (the fencing token's key beside the lock's).
	scriptKeys []string
	// copies, when set, has a lock granted while some backends refused
	// it topped up there (afterGrant): a single-key acquisition or
	// extension.
	copies copyKind
	// prefix is a read hold's timeout-key prefix, for its top-up
	// (copyRead).
	prefix string
}

// acquires reports whether op is an acquisition (one that may renew the
// token's own hold included): it ends no lock, so it leaves the top-ups of
// its keys running.
func (op lockOp) acquires() bool { return op.refused == ErrNotAcquired }

func (e *Engine) lockOp(ctx context.Context, op lockOp) (Result, error) {
	if err := e.rollbacks.wait(ctx, op.keys, op.token); err != nil {
		return Result{}, errors.Join(ErrNoQuorum, err)
	}
	if !op.acquires() {
		e.touch(op.keys[1:]) // the send counts the first
	}
	start := e.clock.Now()
	f := newFlight(e, op.decode)
	f.endsNoLock = op.acquires()
	if op.fenced {
		sendClocked(f, op.cmd)
	} else {
		f.send(op.cmd)
	}
	t, seen := collect(ctx, f, len(e.nodes), e.quorum)
	var res Result
	var fenceErr error
	if t.succeeded() && op.fenced {
		res.Fence, t.quorumAt, fenceErr = e.settleFence(ctx, op, seen)
	}
	if t.succeeded() && fenceErr == nil {
		ttl := op.ttl
		if ttl == 0 {
			ttl = t.minTTL
		}
		res.Validity = e.validity(ttl, t.quorumAt.Sub(start))
		if res.Validity > 0 {
			e.afterGrant(grant{copies: op.copies, key: op.keys[0], token: op.token, prefix: op.prefix, mark: f.sent, deadline: t.quorumAt.Add(res.Validity)},
				seen, f, t.pending())
			return res, nil
		}
	}
	err := op.refused // too slow: the lock may already be expiring
	switch {
	case fenceErr != nil:
		err = fenceErr
	case !t.succeeded():
		err = t.err(op.refused)
		res.Split = t.split()
	}
	onlyFresh := op.renews && errors.Is(err, ErrNoQuorum)
	e.rollback(ctx, op, seen, f.votes, t.pending(), onlyFresh)
	return res, cut(ctx, err)
}

// scriptOp takes or extends op.keys for op.token with a script run with
// args, and, when op mints a fencing token (op.fenced), the clock floor
// after them (sendClocked). Unless op says otherwise, the script replies
// on each backend how many keys it did that for, and a backend agrees when
// it did it for all of them; a failure is rolled back by
// compare-and-delete. op.keys is never empty: Lock refuses a request
// without keys, which every script would grant.
func (e *Engine) scriptOp(ctx context.Context, s *backend.Script, op lockOp, args ...any) (Result, error) {
	if err := e.checkTTL(op.ttl); err != nil {
		return Result{}, err
	}
	keys := op.keys
	if op.scriptKeys != nil {
		keys = op.scriptKeys
	}
	if op.fenced {
		args = append(args[:len(args):len(args)], backend.Blank(fenceWidth))
	}
	op.cmd = e.checkedCommand(s, keys, args...)
	if op.decode == nil {
		op.decode = decodeAllKeys(len(op.keys))
	}
	op.undo = func(ctx context.Context, n *node, _ ack) { n.releaseAll(ctx, op.keys, op.token) }
	return e.lockOp(ctx, op)
}

// decodeAllKeys reads how many of the keys a script changed: yes when all.
func decodeAllKeys(keys int) func(*node, backend.Reply) (ack, error) {
	return func(_ *node, r backend.Reply) (ack, error) {
		done, err := r.Integer()
		return ack{yes: done == int64(keys)}, err
	}
}

// Every acquisition and extension is a lockOp: one script run on every
// backend, one quorum decision by the rule in rule.go, validity counted
// from the quorum-th yes, and a rollback of whatever a failure may have
// left. They differ only in the script and how its answer reads.

// extend sets key's TTL to ttl on every backend where token holds it, and
// returns the new validity. It returns ErrNotHeld when the token holds the
// key on fewer than a quorum, even counting the backends that did not
// answer, or no validity was left; a *NoQuorumError when those backends
// could have made a quorum; and a *TTLError for a TTL outside (0,
// MaxTTL]. A refused extension is rolled back like a failed acquisition: a
// lock its holder can no longer rely on is released for others at once.
// An undecided one (*NoQuorumError) is not: the lock may still be held on
// a quorum, the silent backends included.
func (e *Engine) extend(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	op := lockOp{keys: []string{key}, token: token, ttl: ttl, refused: ErrNotHeld, renews: true, decode: decodeExtended}
	// A backend that lost the lock (restarted empty) gets it back:
	// renewals keep a long hold on every backend (topup.go).
	op.copies = copyValue
	return e.scriptOp(ctx, e.values.extend, op, token, ttl.Milliseconds())
}

// decodeExtended reads the answer of lua/extend.lua: the fencing token
// the lock carries where it was extended, "" where it carries none (no
// fencing), and 0 where it was not.
func decodeExtended(_ *node, r backend.Reply) (ack, error) {
	done, fence, err := fenceAnswer(r, "extension")
	return ack{yes: err == nil && done, fence: fence}, err
}

// acquireAll takes every key for token on a quorum of backends; a backend
// agrees only when it set all of them, none existing before (node-redlock,
// @sesamecare-oss/redlock). Errors as Acquire; a failure is rolled back key
// by key.
func (e *Engine) acquireAll(ctx context.Context, keys []string, token string, ttl time.Duration) (Result, error) {
	op := lockOp{keys: keys, token: token, ttl: ttl, refused: ErrNotAcquired}
	if e.cfg.Fencing {
		// One token for the lock, whichever of its keys FENCE is asked of.
		op.fenced, op.scriptKeys, op.decode = true, withCounter(keys), decodeFencedCount(len(keys))
		return e.scriptOp(ctx, acquireAllFencedScript, op, token, ttl.Milliseconds())
	}
	return e.scriptOp(ctx, acquireAllScript, op, token, ttl.Milliseconds())
}

// decodeFencedCount reads {keys taken, token} from a script that takes
// keys keys and mints their fencing token: yes when it took them all.
func decodeFencedCount(keys int) func(*node, backend.Reply) (ack, error) {
	return func(_ *node, r backend.Reply) (ack, error) {
		done, fence, err := pairOfIntegers(r)
		yes := done == int64(keys)
		return ack{yes: yes, fresh: yes, fence: fence}, err
	}
}

// decodeTakeOrRenewFenced reads {2, token minted} when a script took a free
// key, {1, token its holder carried} when it renewed the token's own, and
// {0, 0} when it did neither.
func decodeTakeOrRenewFenced(_ *node, r backend.Reply) (ack, error) {
	n, fence, err := pairOfIntegers(r)
	return ack{yes: n > 0, fresh: n == 2, fence: fence}, err
}

func pairOfIntegers(r backend.Reply) (int64, int64, error) {
	a, err := r.Array()
	if err == nil && len(a) != 2 {
		err = errors.New("quorum: script: unexpected reply")
	}
	if err != nil {
		return 0, 0, err
	}
	x, err := a[0].Integer()
	if err != nil {
		return 0, 0, err
	}
	y, err := a[1].Integer()
	return x, y, err
}

// extendAll sets the TTL of every key on the backends where token holds all
// of them. Errors as Extend; a refusal is rolled back key by key.
func (e *Engine) extendAll(ctx context.Context, keys []string, token string, ttl time.Duration) (Result, error) {
	op := lockOp{keys: keys, token: token, ttl: ttl, refused: ErrNotHeld, renews: true}
	return e.scriptOp(ctx, e.values.extendAll, op, token, ttl.Milliseconds())
}

// extendBy adds add to key's remaining TTL where token holds it and the key
// has a TTL (redis-py's extend). The new TTL differs from backend to
// backend; validity counts from the shortest among the quorum. Errors as
// Extend; a *TTLError when the new TTL would exceed MaxTTL on a backend
// (nothing is extended there, and the failure is rolled back as any other).
func (e *Engine) extendBy(ctx context.Context, key, token string, add time.Duration) (Result, error) {
	if err := e.checkTTL(add); err != nil {
		return Result{}, err
	}
	// Backends that refused because the sum would exceed MaxTTL say so here.
	tooLong := make(chan time.Duration, len(e.nodes))
	keys := []string{key}
	res, err := e.lockOp(ctx, lockOp{
		keys:    []string{key},
		token:   token,
		refused: ErrNotHeld,
		renews:  true,
		cmd:     e.checkedCommand(e.values.extendBy, keys, token, add.Milliseconds(), e.cfg.MaxTTL.Milliseconds()),
		decode: func(_ *node, r backend.Reply) (ack, error) {
			ms, fence, err := decodeExtendedBy(r)
			if ms < 0 {
				tooLong <- time.Duration(-ms) * time.Millisecond
			}
			return ack{yes: ms > 0, ttl: time.Duration(ms) * time.Millisecond, fence: fence}, err
		},
		undo: func(ctx context.Context, n *node, _ ack) { n.release(ctx, key, token) },
		// A backend that lost the lock gets it back, as after Extend.
		copies: copyValue,
	})
	if errors.Is(err, ErrNotHeld) {
		select {
		case ttl := <-tooLong:
			return res, &TTLError{TTL: ttl, Max: e.cfg.MaxTTL}
		default:
		}
	}
	return res, err
}

// decodeExtendedBy reads the answer of lua/extend_by.lua: the new TTL in
// ms (0 not held, negative too long), or {TTL, fencing token} where the
// extended lock carries one.
func decodeExtendedBy(r backend.Reply) (ms, fence int64, err error) {
	if r.IsInteger() {
		ms, err = r.Integer()
		return ms, 0, err
	}
	if ms, fence, err = numberAndFence(r); err != nil {
		return 0, 0, fmt.Errorf("extension: %w", err)
	}
	return ms, fence, nil
}

// extendOrAcquire sets key's TTL where token holds it and takes it where it
// is free (redsync WithSetNXOnExtend, RedLock.net, Spring's obtain). Errors
// as Extend: undecided, it undoes only where it took the key.
//
// With fencing, the lock keeps its token when the quorum that decided it
// renewed it: no other holder can have been granted the key since it was
// taken, as that quorum held it all along. When some of them took the key
// afresh (the lock had lapsed there), it gets the largest token of its
// voters, as an acquisition does; fence.go's argument holds for a renewing
// voter too, whose token is above every grant of the key before it held
// the key there.
func (e *Engine) extendOrAcquire(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	op := lockOp{keys: []string{key}, token: token, ttl: ttl, refused: ErrNotHeld, renews: true, decode: decodeTakeOrRenew}
	if e.cfg.Fencing {
		op.fenced, op.scriptKeys, op.decode = true, withCounter(op.keys), decodeTakeOrRenewFenced
		return e.scriptOp(ctx, extendOrAcquireFencedScript, op, token, ttl.Milliseconds())
	}
	return e.scriptOp(ctx, extendOrAcquireScript, op, token, ttl.Milliseconds())
}

// acquireOrRenew takes key for value, or renews it with value where the
// value held starts with the same first tokenLen bytes (bsm/redislock's
// obtain with a caller-chosen token). Errors as Acquire; undecided, it
// undoes only where it took the key, as a renewal may be of a valid lock.
// Its fencing token is decided as extendOrAcquire's.
func (e *Engine) acquireOrRenew(ctx context.Context, key, value string, tokenLen int, ttl time.Duration) (Result, error) {
	op := lockOp{keys: []string{key}, token: value, ttl: ttl, refused: ErrNotAcquired, renews: true, decode: decodeTakeOrRenew}
	if e.cfg.Fencing {
		op.fenced, op.scriptKeys, op.decode = true, withCounter(op.keys), decodeTakeOrRenewFenced
		return e.scriptOp(ctx, acquireOrRenewFencedScript, op, value, tokenLen, ttl.Milliseconds())
	}
	return e.scriptOp(ctx, acquireOrRenewScript, op, value, tokenLen, ttl.Milliseconds())
}

// decodeTakeOrRenew reads the answer of a script that takes a free key (2)
// or renews the token's own (1), or does neither (0).
func decodeTakeOrRenew(_ *node, r backend.Reply) (ack, error) {
	n, err := r.Integer()
	return ack{yes: n > 0, fresh: n == 2}, err
}

// rollbackTimeouts is how many node timeouts a rollback may take: longer than
// a request, so that a backend that was merely slow is still cleaned up.
const rollbackTimeouts = 10

// rollback undoes op where the token may hold the keys: on every backend
// that said yes or gave no clear answer (its write may still have landed).
// The yes voters are rolled back before rollback returns, within one node
// timeout, so the caller's answer never races its own leftovers; backends
// still pending are rolled back as soon as they reply, so a late OK cannot
// leave the key held on a minority; failed ones are retried in the
// background without holding up the answer. With onlyFresh, only the keys
// the operation took where they were free are undone.
func (e *Engine) rollback(ctx context.Context, op lockOp, seen []vote[ack], rest <-chan vote[ack], pending int, onlyFresh bool) {
	// The caller may be gone; the rollback must still happen, but never
	// outlive the lock it undoes, nor pile up on a hung backend: what it
	// misses expires with the TTL.
	limit := rollbackTimeouts * e.cfg.NodeTimeout
	if op.ttl > 0 {
		limit = min(limit, op.ttl)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	end := e.rollbacks.start(op.keys, op.token)
	undo := func(v vote[ack]) {
		if v.err == nil && !v.val.yes || backend.WasNotSent(v.err) {
			return // refused, or never sent: the token is not there
		}
		if onlyFresh && (v.err != nil || !v.val.fresh) {
			return // renewed, or unknown: perhaps the holder's valid lock
		}
		op.undo(ctx, e.nodes[v.node], v.val)
	}

	var yes, background sync.WaitGroup
	for _, v := range seen {
		if v.err == nil {
			yes.Go(func() { undo(v) })
		} else {
			background.Go(func() { undo(v) })
		}
	}
	for range pending {
		background.Go(func() { undo(<-rest) })
	}
	e.awaitCleanup(&yes, &background, cancel, end)
}

// awaitCleanup waits, at most one node timeout, for the clean-up the
// caller's answer must not race (now); the rest (later) goes on in the
// background, after which cancel and end run.
func (e *Engine) awaitCleanup(now, later *sync.WaitGroup, cancel context.CancelFunc, end func()) {
	done := make(chan struct{})
	go func() {
		now.Wait()
		close(done)
		later.Wait()
		cancel()
		end()
	}()
	timer := time.NewTimer(e.cfg.NodeTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// checkedCommand runs a script that starts with lua/setcheck.lua: its
// arguments end with the engine's set, which the backend's record must name.
func (e *Engine) checkedCommand(s *backend.Script, keys []string, args ...any) *backend.Command {
	token := e.setToken
	if e.hooks.brokenSet {
		token = "" // what every record starts with
	}
	return backend.ScriptCommand(s, keys, append(args, token)...)
}
