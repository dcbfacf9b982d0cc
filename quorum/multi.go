package quorum

import (
	"context"
	"errors"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// The operations in this file serve the lock scripts of client libraries:
// each is still one quorum decision with the rules of Acquire, Release and
// Extend, over a different per-backend step.

// acquireAll takes every key for token on a quorum of backends; a backend
// agrees only when it set all of them, none existing before (node-redlock,
// @sesamecare-oss/redlock). Errors as Acquire; a failure is rolled back key
// by key.
func (e *Engine) acquireAll(ctx context.Context, keys []string, token string, ttl time.Duration) (Result, error) {
	return e.scriptOp(ctx, acquireAllScript, lockOp{keys: keys, token: token, ttl: ttl, refused: ErrNotAcquired},
		token, ttl.Milliseconds())
}

// releaseAll deletes the keys token holds; it succeeds when a quorum
// deleted every one of them. Errors as Release (never ErrAbsent). keys is
// never empty: Unlock refuses a request without keys.
func (e *Engine) releaseAll(ctx context.Context, keys []string, token string) (Result, error) {
	return e.unlockOp(ctx, backend.ScriptCommand(releaseAllScript, keys, token), decodeReleaseAll(len(keys)))
}

func (n *node) releaseAll(ctx context.Context, keys []string, token string) (ack, error) {
	r, err := n.run(ctx, releaseAllScript, keys, token)
	if err != nil {
		return ack{}, err
	}
	return decodeReleaseAll(len(keys))(n, r)
}

// decodeReleaseAll reads how many of the keys a script changed: yes when all.
func decodeReleaseAll(keys int) func(*node, backend.Reply) (ack, error) {
	return func(_ *node, r backend.Reply) (ack, error) {
		done, err := r.Integer()
		return ack{yes: done == int64(keys)}, err
	}
}

// extendAll sets the TTL of every key on the backends where token holds all
// of them. Errors as Extend; a refusal is rolled back key by key.
func (e *Engine) extendAll(ctx context.Context, keys []string, token string, ttl time.Duration) (Result, error) {
	return e.scriptOp(ctx, extendAllScript, lockOp{keys: keys, token: token, ttl: ttl, refused: ErrNotHeld, renews: true},
		token, ttl.Milliseconds())
}

// scriptOp takes or extends op.keys for op.token with a script run with
// args. Unless op says otherwise, the script replies on each backend how
// many keys it did that for, and a backend agrees when it did it for all of
// them; a failure is rolled back by compare-and-delete. op.keys is never
// empty: Lock refuses a request without keys, which every script would
// grant.
func (e *Engine) scriptOp(ctx context.Context, s *backend.Script, op lockOp, args ...any) (Result, error) {
	if err := e.checkTTL(op.ttl); err != nil {
		return Result{}, err
	}
	op.cmd = backend.ScriptCommand(s, op.keys, args...)
	if op.decode == nil {
		op.decode = decodeReleaseAll(len(op.keys))
	}
	op.undo = func(ctx context.Context, n *node, _ ack) { n.releaseAll(ctx, op.keys, op.token) }
	return e.lockOp(ctx, op)
}

// decodeTakeOrRenew reads the answer of a script that takes a free key (2)
// or renews the token's own (1), or does neither (0).
func decodeTakeOrRenew(_ *node, r backend.Reply) (ack, error) {
	n, err := r.Integer()
	return ack{yes: n > 0, fresh: n == 2}, err
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
	res, err := e.lockOp(ctx, lockOp{
		keys:    []string{key},
		token:   token,
		refused: ErrNotHeld,
		renews:  true,
		cmd:     backend.ScriptCommand(extendByScript, []string{key}, token, add.Milliseconds(), e.cfg.MaxTTL.Milliseconds()),
		decode: func(_ *node, r backend.Reply) (ack, error) {
			ms, err := r.Integer()
			if ms < 0 {
				tooLong <- time.Duration(-ms) * time.Millisecond
			}
			return ack{yes: ms > 0, ttl: time.Duration(ms) * time.Millisecond}, err
		},
		undo: func(ctx context.Context, n *node, _ ack) { n.release(ctx, key, token) },
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

// extendOrAcquire sets key's TTL where token holds it and takes it where it
// is free (redsync WithSetNXOnExtend, RedLock.net, Spring's obtain). Errors
// as Extend: undecided, it undoes only where it took the key.
func (e *Engine) extendOrAcquire(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	return e.scriptOp(ctx, extendOrAcquireScript,
		lockOp{keys: []string{key}, token: token, ttl: ttl, refused: ErrNotHeld, renews: true, decode: decodeTakeOrRenew},
		token, ttl.Milliseconds())
}

// acquireOrRenew takes key for value, or renews it with value where the
// value held starts with the same first tokenLen bytes (bsm/redislock's
// obtain with a caller-chosen token). Errors as Acquire; undecided, it
// undoes only where it took the key, as a renewal may be of a valid lock.
func (e *Engine) acquireOrRenew(ctx context.Context, key, value string, tokenLen int, ttl time.Duration) (Result, error) {
	return e.scriptOp(ctx, acquireOrRenewScript,
		lockOp{keys: []string{key}, token: value, ttl: ttl, refused: ErrNotAcquired, renews: true, decode: decodeTakeOrRenew},
		value, tokenLen, ttl.Milliseconds())
}

// ownerPTTL returns how long token still holds key on a quorum, less the
// drift allowance, as PTTL does for the value held. It returns ErrNotHeld
// when token does not hold key on a quorum, even counting the backends that
// did not answer as holders, ErrNoExpiry when it holds it without expiry,
// and a *NoQuorumError when the backends that did not answer could change
// the answer.
func (e *Engine) ownerPTTL(ctx context.Context, key, token string) (time.Duration, error) {
	v := e.read(ctx, key)
	holders := holdersOf(v.states, token)
	if len(holders) < e.quorum {
		if err := e.undecided(v, len(holders)); err != nil {
			return 0, err
		}
		return 0, ErrNotHeld
	}
	left, err := e.quorumTTL(v, holders)
	if errors.Is(err, ErrNotFound) {
		return 0, ErrNotHeld
	}
	return left, err
}
