package quorum

import (
	"context"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// release deletes key on every backend where token holds it. It succeeds
// when a quorum deleted it, returns ErrNotHeld when fewer deleted and the
// backends that did not answer could not have made them a quorum (the lock
// had expired or was never ours: the client should know its critical
// section may not have been exclusive) — ErrAbsent, which is also
// ErrNotHeld, when a quorum found no key at all — and a *NoQuorumError when
// they could.
func (e *Engine) release(ctx context.Context, key, token string) (Result, error) {
	id := newReleaseID()
	r, err := e.unlockOp(ctx, backend.ScriptCommand(e.values.release, []string{key}, token, id), decodeRelease)
	if err == nil {
		// This engine's waiters need not wait for the backends' notice.
		e.released(key, id)
	}
	return r, err
}

// unlockOp decides a release: done where a quorum did it. "Not held" is a
// claim that the client's lock was lost, so it is made only when the
// backends that failed to answer could not have made a quorum of yes:
// otherwise the answer is that nothing could be decided. It hears from
// every backend, so that a quorum of "absent" is told apart.
func (e *Engine) unlockOp(ctx context.Context, cmd *backend.Command, decode func(*node, backend.Reply) (ack, error)) (Result, error) {
	f := fanout(e, cmd, decode)
	t := &tally{total: len(e.nodes), quorum: e.quorum}
	// Nothing is decided before a quorum has voted.
	if f.waitFor(ctx, e.quorum) {
		for t.pending() > 0 && !t.succeeded() {
			v, ok := f.next(ctx)
			if !ok {
				break
			}
			t.add(v)
		}
	}
	if t.succeeded() {
		return Result{}, nil
	}
	return Result{}, cut(ctx, t.err(ErrNotHeld))
}

// releaseAll deletes the keys token holds; it succeeds when a quorum
// deleted every one of them. Errors as Release (never ErrAbsent). keys is
// never empty: Unlock refuses a request without keys.
func (e *Engine) releaseAll(ctx context.Context, keys []string, token string) (Result, error) {
	e.touch(keys[1:]) // the send counts the first
	id := newReleaseID()
	r, err := e.unlockOp(ctx, backend.ScriptCommand(e.values.releaseAll, keys, token, id), decodeAllKeys(len(keys)))
	if err == nil {
		for _, k := range keys {
			e.released(k, id)
		}
	}
	return r, err
}

// release runs compare-and-delete on one backend.
func (n *node) release(ctx context.Context, key, token string) (ack, error) {
	r, err := n.run(ctx, n.values.release, []string{key}, token, newReleaseID())
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

func (n *node) releaseAll(ctx context.Context, keys []string, token string) (ack, error) {
	r, err := n.run(ctx, n.values.releaseAll, keys, token, newReleaseID())
	if err != nil {
		return ack{}, err
	}
	return decodeAllKeys(len(keys))(n, r)
}
