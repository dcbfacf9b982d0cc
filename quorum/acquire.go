package quorum

import (
	"context"
	"errors"
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
	return e.lockOp(ctx, lockOp{
		keys:    []string{key},
		token:   token,
		ttl:     ttl,
		refused: ErrNotAcquired,
		cmd:     backend.ScriptCommand(acquireScript, []string{key}, token, ttl.Milliseconds()),
		decode: func(_ *node, r backend.Reply) (ack, error) {
			stamp, err := r.Integer()
			return ack{yes: stamp > 0, fresh: stamp > 0, stamp: stamp}, err
		},
		undo: func(ctx context.Context, n *node, v ack) {
			if v.yes {
				// Exactly this acquisition: a retry with the same token,
				// through this proxy or another, keeps its holding.
				n.run(ctx, releaseStampedScript, []string{key}, token, v.stamp)
				return
			}
			n.release(ctx, key, token)
		},
	})
}

// lockOp is an acquisition or extension: it holds with a quorum of yes
// votes and positive validity, and is rolled back otherwise.
type lockOp struct {
	// keys and token are what the operation takes or extends.
	keys   []string
	token  string
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
}

func (e *Engine) lockOp(ctx context.Context, op lockOp) (Result, error) {
	if err := e.rollbacks.wait(ctx, op.keys, op.token); err != nil {
		return Result{}, errors.Join(ErrNoQuorum, err)
	}
	start := time.Now()
	f := fanout(e, op.cmd, op.decode)
	t, seen := collect(ctx, f, len(e.nodes), e.quorum)
	var res Result
	if t.succeeded() {
		ttl := op.ttl
		if ttl == 0 {
			ttl = t.minTTL
		}
		res.Validity = e.validity(ttl, t.quorumAt.Sub(start))
		if res.Validity > 0 {
			return res, nil
		}
	}
	err := op.refused // too slow: the lock may already be expiring
	if !t.succeeded() {
		err = t.err(op.refused)
	}
	onlyFresh := op.renews && errors.Is(err, ErrNoQuorum)
	e.rollback(ctx, op, seen, f.votes, t.pending(), onlyFresh)
	return res, cut(ctx, err)
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
	done := make(chan struct{})
	go func() {
		yes.Wait()
		close(done)
		background.Wait()
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

// release runs compare-and-delete on one backend.
func (n *node) release(ctx context.Context, key, token string) (ack, error) {
	r, err := n.run(ctx, releaseScript, []string{key}, token)
	if err != nil {
		return ack{}, err
	}
	return decodeRelease(n, r)
}

// decodeRelease reads release.lua's answer: 1 deleted, 0 held by another
// token, -1 absent.
func decodeRelease(_ *node, r backend.Reply) (ack, error) {
	deleted, err := r.Integer()
	return ack{yes: deleted == 1, absent: deleted == -1}, err
}
