package quorum

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// del deletes key on every backend, whoever holds it: an administrative
// unlock. It reports whether a quorum deleted it, and returns a
// *NoQuorumError when the backends that did not answer could have made
// that a quorum.
func (e *Engine) del(ctx context.Context, key string) (bool, error) {
	id := newReleaseID()
	deleted, err := e.writeAll(ctx, backend.ScriptCommand(deleteScript, []string{key}, id))
	if deleted {
		e.released(key, id)
	}
	return deleted, err
}

// expire sets key's TTL on every backend, whoever holds it. It reports
// whether a quorum set it, and returns a *NoQuorumError when the backends
// that did not answer could have made that a quorum, and a *TTLError for a
// TTL outside (0, MaxTTL].
func (e *Engine) expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if err := e.checkTTL(ttl); err != nil {
		return false, err
	}
	return e.writeAll(ctx, e.checkedCommand(expireScript, []string{key}, ttl.Milliseconds()))
}

// writeAll runs an unconditional write on every backend, which answers 1
// where it took effect.
func (e *Engine) writeAll(ctx context.Context, cmd *backend.Command) (bool, error) {
	f := fanout(e, cmd, func(_ *node, r backend.Reply) (ack, error) {
		n, err := r.Integer()
		return ack{yes: n == 1}, err
	})
	t, _ := collect(ctx, f, len(e.nodes), e.quorum)
	if t.succeeded() {
		return true, nil
	}
	if err := t.err(nil); err != nil {
		return false, cut(ctx, err)
	}
	return false, nil
}
