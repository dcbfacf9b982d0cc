package quorum

import (
	"context"
	"time"

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
	return e.unlockOp(ctx, backend.ScriptCommand(releaseScript, []string{key}, token), decodeRelease)
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

// extend sets key's TTL to ttl on every backend where token holds it, and
// returns the new validity. It returns ErrNotHeld when the token holds the
// key on fewer than a quorum, even counting the backends that did not
// answer, or no validity was left; a *NoQuorumError when those backends
// could have made a quorum; and a *TTLError for a TTL outside (0, MaxTTL]. A refused extension is rolled back like a failed
// acquisition: a lock its holder can no longer rely on is released for
// others at once. An undecided one (*NoQuorumError) is not: the lock may
// still be held on a quorum, the silent backends included.
func (e *Engine) extend(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	return e.scriptOp(ctx, extendScript, lockOp{keys: []string{key}, token: token, ttl: ttl, refused: ErrNotHeld, renews: true},
		token, ttl.Milliseconds())
}
