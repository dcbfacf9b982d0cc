package quorum

import (
	"context"
	"errors"
	"math"
	"time"
)

// keyState is one backend's view of a key.
type keyState struct {
	exists   bool
	hasValue bool // a string value; other types exist without one
	value    string
	pttl     time.Duration // math.MaxInt64 when the key has no expiry
}

// read looks at key on every backend and returns the views that count, or a
// *NoQuorumError when fewer than a quorum answered.
func (e *Engine) read(ctx context.Context, key string) ([]keyState, error) {
	f := fanout(e, scriptCommand(readScript, []string{key}), parseKeyState)
	var states []keyState
	var failures []*NodeError
	for _, v := range collectAll(f, len(e.nodes)) {
		if v.err != nil {
			failures = append(failures, v.err.(*NodeError))
			continue
		}
		states = append(states, v.val)
	}
	if len(states) < e.quorum {
		return nil, &NoQuorumError{Counted: len(states), Needed: e.quorum, Total: len(e.nodes), Nodes: failures}
	}
	return states, nil
}

func parseKeyState(_ *node, r reply) (keyState, error) {
	if r.kind == 0 {
		return keyState{}, nil // absent
	}
	if r.kind != '*' || len(r.array) != 2 {
		return keyState{}, errors.New("quorum: unexpected read reply")
	}
	ms, err := r.array[1].integer()
	if err != nil {
		return keyState{}, errors.New("quorum: unexpected pttl reply")
	}
	s := keyState{exists: true, pttl: time.Duration(ms) * time.Millisecond}
	if ms < 0 { // -1: no expiry (-2 cannot happen: the script saw the key)
		s.pttl = math.MaxInt64
	}
	if v := r.array[0]; v.kind == '$' {
		s.hasValue, s.value = true, v.str
	}
	return s, nil
}

// majority returns the value held by at least q of states and the views of
// the backends that hold it.
func majority(states []keyState, q int) (holders []keyState, ok bool) {
	counts := make(map[string]int, len(states))
	for _, s := range states {
		if s.hasValue {
			counts[s.value]++
		}
	}
	for value, c := range counts {
		if c < q {
			continue
		}
		for _, s := range states {
			if s.hasValue && s.value == value {
				holders = append(holders, s)
			}
		}
		return holders, true
	}
	return nil, false
}

// Get returns the value held by a quorum of backends. It returns ErrNotFound
// when a quorum answered and no value is held by a quorum, and a
// *NoQuorumError when fewer answered.
func (e *Engine) Get(ctx context.Context, key string) (string, error) {
	states, err := e.read(ctx, key)
	if err != nil {
		return "", err
	}
	holders, ok := majority(states, e.quorum)
	if !ok {
		return "", ErrNotFound
	}
	return holders[0].value, nil
}

// PTTL returns how long the value held by a quorum stays held by a quorum,
// less the drift allowance: the quorum-th longest remaining TTL among its
// holders. It returns ErrNotFound when no value is held by a quorum (or too
// little time is left to count on), ErrNoExpiry when a quorum holds it
// without expiry, and a *NoQuorumError when too few backends answered.
func (e *Engine) PTTL(ctx context.Context, key string) (time.Duration, error) {
	states, err := e.read(ctx, key)
	if err != nil {
		return 0, err
	}
	holders, ok := majority(states, e.quorum)
	if !ok {
		return 0, ErrNotFound
	}
	return e.quorumTTL(holders)
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Exists reports whether key exists on a quorum of backends, whatever its
// values there. It returns a *NoQuorumError when too few answered.
func (e *Engine) Exists(ctx context.Context, key string) (bool, error) {
	states, err := e.read(ctx, key)
	if err != nil {
		return false, err
	}
	n := 0
	for _, s := range states {
		if s.exists {
			n++
		}
	}
	return n >= e.quorum, nil
}

// Delete deletes key on every backend, whoever holds it: an administrative
// unlock. It reports whether a quorum deleted it, and returns a
// *NoQuorumError when too few backends answered.
func (e *Engine) Delete(ctx context.Context, key string) (bool, error) {
	return e.writeAll(plainCommand("DEL", key))
}

// Expire sets key's TTL on every backend, whoever holds it. It reports
// whether a quorum set it, and returns a *NoQuorumError when too few
// backends answered and a *TTLError for a TTL outside (0, MaxTTL].
func (e *Engine) Expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if err := e.checkTTL(ttl); err != nil {
		return false, err
	}
	return e.writeAll(plainCommand("PEXPIRE", key, ttl.Milliseconds()))
}

// writeAll runs an unconditional write on every backend, which answers 1
// where it took effect.
func (e *Engine) writeAll(cmd *command) (bool, error) {
	f := fanout(e, cmd, func(_ *node, r reply) (ack, error) {
		n, err := r.integer()
		return ack{yes: n == 1}, err
	})
	t, _ := collect(f, len(e.nodes), e.quorum)
	if t.succeeded() {
		return true, nil
	}
	if err := t.err(nil); err != nil {
		return false, err
	}
	return false, nil
}
