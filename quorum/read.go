package quorum

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// keyState is one backend's view of a key.
type keyState struct {
	exists   bool
	hasValue bool // a string value; other types exist without one
	value    string
	pttl     time.Duration // math.MaxInt64 when the key has no expiry
}

// views is what the backends that answered a read see of a key, and why the
// others gave no view that counts.
type views struct {
	ctx      context.Context
	states   []keyState
	failures []*NodeError
	unheard  int // backends not heard from when ctx ended
}

// read looks at key on every backend, hearing from each (or its timeout),
// or from those that answered before ctx ended.
func (e *Engine) read(ctx context.Context, key string) views {
	return e.readWith(ctx, backend.ScriptCommand(e.values.read, []string{key}), parseKeyState)
}

// readWith is read with another look at the key: cmd, whose reply decode
// reads as a view.
func (e *Engine) readWith(ctx context.Context, cmd *backend.Command, decode func(*node, backend.Reply) (keyState, error)) views {
	f := fanoutKeeping(e, cmd, decode)
	v := views{ctx: ctx}
	votes := collectAll(ctx, f, len(e.nodes))
	v.unheard = len(e.nodes) - len(votes)
	for _, vt := range votes {
		if vt.err != nil {
			v.failures = append(v.failures, vt.err.(*NodeError))
			continue
		}
		v.states = append(v.states, vt.val)
	}
	return v
}

func parseKeyState(_ *node, r backend.Reply) (keyState, error) {
	if r.IsNil() {
		return keyState{}, nil // absent
	}
	pair, err := r.Array()
	if err != nil || len(pair) != 2 {
		return keyState{}, errors.New("quorum: unexpected read reply")
	}
	ms, err := pair[1].Integer()
	if err != nil {
		return keyState{}, errors.New("quorum: unexpected pttl reply")
	}
	s := keyState{exists: true, pttl: time.Duration(ms) * time.Millisecond}
	if ms < 0 { // -1: no expiry (-2 cannot happen: the script saw the key)
		s.pttl = math.MaxInt64
	}
	if value, err := pair[0].Bulk(); err == nil {
		s.hasValue, s.value = true, value
	}
	return s, nil
}

// mostHeld returns the views of the backends that hold the value held most
// often (none when no backend holds a value). A value held by a quorum is
// the only one that can be.
func mostHeld(states []keyState) []keyState {
	counts := make(map[string]int, len(states))
	best, most := "", 0
	for _, s := range states {
		if !s.hasValue {
			continue
		}
		if counts[s.value]++; counts[s.value] > most {
			best, most = s.value, counts[s.value]
		}
	}
	if most == 0 {
		return nil
	}
	return holdersOf(states, best)
}

// holdersOf returns the views of the backends that hold value.
func holdersOf(states []keyState, value string) []keyState {
	var holders []keyState
	for _, s := range states {
		if s.hasValue && s.value == value {
			holders = append(holders, s)
		}
	}
	return holders
}

// get returns the value held by a quorum of backends. It returns ErrNotFound
// when no value is held by a quorum, even counting the backends that did not
// answer as holders, and a *NoQuorumError when those could make one.
func (e *Engine) get(ctx context.Context, key string) (string, error) {
	return e.quorumValue(e.read(ctx, key))
}

// quorumValue is the value a quorum of the backends v looked at hold, as
// get says.
func (e *Engine) quorumValue(v views) (string, error) {
	holders := mostHeld(v.states)
	if len(holders) >= e.quorum {
		return holders[0].value, nil
	}
	if err := e.undecided(v, len(holders)); err != nil {
		return "", err
	}
	return "", ErrNotFound
}

// pttl returns how long the value held by a quorum stays held by a quorum,
// less the drift allowance: the quorum-th longest remaining TTL among its
// holders that answered (backends that did not answer can only make it
// longer). It returns ErrNotFound when no value is held by a quorum (or
// too little time is left to count on), ErrNoExpiry when a quorum holds it
// without expiry, and a *NoQuorumError when the backends that did not
// answer could make either of those untrue.
func (e *Engine) pttl(ctx context.Context, key string) (time.Duration, error) {
	v := e.read(ctx, key)
	holders := mostHeld(v.states)
	if holders == nil {
		// No value anywhere: a key of another type (a hash lock) stays as
		// long as a quorum has it, or nothing is there.
		return e.presentTTL(v)
	}
	if len(holders) < e.quorum {
		if err := e.undecided(v, len(holders)); err != nil {
			return 0, err
		}
		return 0, ErrNotFound
	}
	return e.quorumTTL(v, holders)
}

// exists reports whether key exists on a quorum of backends, whatever its
// values there. It returns a *NoQuorumError when it exists on fewer and the
// backends that did not answer could make them a quorum.
func (e *Engine) exists(ctx context.Context, key string) (bool, error) {
	return e.onQuorum(e.read(ctx, key))
}

// onQuorum reports whether what v looked at exists on a quorum of
// backends, and returns a *NoQuorumError when it exists on fewer and the
// backends that did not answer could make them a quorum.
func (e *Engine) onQuorum(v views) (bool, error) {
	n := 0
	for _, s := range v.states {
		if s.exists {
			n++
		}
	}
	if n >= e.quorum {
		return true, nil
	}
	return false, e.undecided(v, n)
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
