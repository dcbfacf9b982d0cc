package quorum

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Relaying a message to every engine on the same backends, for a front end
// whose clients publish to each other (a PUBLISH to a lock's unlock
// channel reaches the subscribers of every proxy). The backends carry it
// as pub/sub does, fire and forget: each copy is published on every
// backend, and each engine hears the N copies as one by the id they share.
// Nothing of it touches a lock.

// relayPrefix starts the channel of a relayed message: relayPrefix +
// topic, with "<id>:<message>".
const relayPrefix = ReservedPrefix + "relay:"

// relayIDBytes is the size of a relayed message's id, random: two
// messages share one with negligible probability.
const relayIDBytes = 12

// ErrNotRelayed is Relay's answer when no backend took the message.
var ErrNotRelayed = errors.New("quorum: no backend took the relayed message")

// Relay publishes message on topic through every backend, so that every
// engine's Relayed callers of a pattern topic matches hear it once. It
// waits for the backends' answers (ctx and the backend timeout bound the
// wait) and returns ErrNotRelayed when none took it; one that took it is
// enough, since each engine listens to every backend.
func (e *Engine) Relay(ctx context.Context, topic, message string) error {
	id := make([]byte, relayIDBytes)
	rand.Read(id)
	cmd := backend.KeylessCommand("PUBLISH", relayPrefix+topic, hex.EncodeToString(id)+":"+message)
	f := fanout(e, cmd, func(_ *node, r backend.Reply) (struct{}, error) {
		_, err := r.Integer()
		return struct{}{}, err
	})
	for _, v := range collectAll(ctx, f, len(e.nodes)) {
		var (
			q *QuarantineError
			c *ClockError
		)
		// A backend that does not count toward a quorum published it
		// all the same: every engine hears it.
		if v.err == nil || errors.As(v.err, &q) || errors.As(v.err, &c) {
			return nil
		}
	}
	return ErrNotRelayed
}

// Relayed calls fn(topic, message) for each message Relay published on a
// topic that matches pattern (Redis's glob), through any engine, once
// however many backends carried it, at the first copy (each Relay is done
// on every backend before it returns, so one client's messages are heard
// in order; a release it made before may come after them: a release is
// told once it is everywhere), until stop is called. It returns once
// a quorum of backends carry the pattern, or after the backend timeout. fn
// is called from the engine's goroutines and must not block; it may be
// called once more while stop runs.
func (e *Engine) Relayed(pattern string, fn func(topic, message string)) (stop func()) {
	return e.watchPattern(relayPrefix+pattern, 1, "", fn)
}

// relayed hears one backend's copy of a relayed message.
func (w *waits) relayed(from int, pattern, topic, payload string) {
	id, message, ok := strings.Cut(payload, ":")
	if !ok || pattern == "" {
		return
	}
	w.watched(from, pattern, id, topic, message)
}
