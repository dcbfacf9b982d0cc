package proxy

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// keyspace is the Locker as one user sees it: every key checked against
// max_key_bytes and prefixed with the user's key prefix, every token
// checked against max_token_bytes, before the call reaches the Locker.
// It implements every method itself, without embedding, so that a method
// added to Locker cannot bypass the prefix.
type keyspace struct {
	locks            Locker
	prefix           string
	maxKey, maxToken int
	err              error // when set, every key is refused with it
	// scripts are the scripts this user loaded (scripts.go).
	scripts *scriptCache
}

var _ Locker = (*keyspace)(nil)

// newKeyspace returns a keyspace under prefix with cfg's limits.
func (s *Server) newKeyspace(prefix string, cfg Config) *keyspace {
	return &keyspace{locks: s.locks, prefix: prefix, maxKey: cfg.MaxKeyBytes, maxToken: cfg.MaxTokenBytes,
		scripts: newScriptCache(scriptCacheSize)}
}

// unauthenticated is the keyspace of a connection that has not
// authenticated: it refuses every key. serveRESP never lets such a
// connection reach a lock command; this is the second lock on that door.
var unauthenticated = &keyspace{err: errNoAuth, scripts: newScriptCache(0)}

// space returns the keyspace of the user conn authenticated as.
func space(conn redcon.Conn) *keyspace {
	if u := state(conn).user; u != nil {
		return u.locks
	}
	return unauthenticated
}

func (k *keyspace) key(key string) (string, error) {
	switch {
	case k.err != nil:
		return "", k.err
	case len(key) > k.maxKey:
		return "", errorf("ERR key of %d bytes exceeds max_key_bytes (%d)", len(key), k.maxKey)
	}
	return k.prefix + key, nil
}

func (k *keyspace) keys(keys []string) ([]string, error) {
	out := make([]string, len(keys))
	for i, key := range keys {
		var err error
		if out[i], err = k.key(key); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkKeys checks the length of every key of a multi-key command before
// any of them is acted on.
func (k *keyspace) checkKeys(keys [][]byte) error {
	for _, key := range keys {
		if _, err := k.key(string(key)); err != nil {
			return err
		}
	}
	return nil
}

func (k *keyspace) token(token string) error {
	if len(token) > k.maxToken {
		return errorf("ERR token of %d bytes exceeds max_token_bytes (%d)", len(token), k.maxToken)
	}
	return nil
}

// keysToken checks and prefixes keys, and checks token.
func (k *keyspace) keysToken(keys []string, token string) ([]string, error) {
	keys, err := k.keys(keys)
	if err == nil {
		err = k.token(token)
	}
	return keys, err
}

func (k *keyspace) Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error) {
	var err error
	if req.Keys, err = k.keysToken(req.Keys, req.Token); err != nil {
		return quorum.Result{}, err
	}
	return k.locks.Lock(ctx, req)
}

func (k *keyspace) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	var err error
	if req.Keys, err = k.keysToken(req.Keys, req.Token); err != nil {
		return quorum.Result{}, err
	}
	// The latch is a key the backends write (OpHashRelease): it is the
	// user's, under the same prefix.
	if req.Latch != "" {
		if req.Latch, err = k.key(req.Latch); err != nil {
			return quorum.Result{}, err
		}
	}
	return k.locks.Unlock(ctx, req)
}

func (k *keyspace) Read(ctx context.Context, req quorum.Read) (quorum.Reading, error) {
	key, err := k.key(req.Key)
	if err == nil {
		err = k.token(req.Token)
	}
	if err != nil {
		return quorum.Reading{}, err
	}
	req.Key = key
	return k.locks.Read(ctx, req)
}

func (k *keyspace) Write(ctx context.Context, req quorum.Write) (bool, error) {
	var err error
	if req.Key, err = k.key(req.Key); err != nil {
		return false, err
	}
	return k.locks.Write(ctx, req)
}

// MaxTTL is the Locker's; the unauthenticated keyspace has none.
func (k *keyspace) MaxTTL() time.Duration {
	if k.locks == nil {
		return 0
	}
	return k.locks.MaxTTL()
}

// RenewFields renews hash locks under the user's prefix, each key and
// owner checked as Lock checks them; one refused answers its own error.
// A Locker that renews none refuses them all.
func (k *keyspace) RenewFields(ctx context.Context, ttl time.Duration, locks []quorum.Held) []quorum.Renewed {
	r, ok := k.locks.(FieldRenewer)
	if !ok {
		return notRenewed(len(locks))
	}
	out := make([]quorum.Renewed, len(locks))
	sendable := make([]quorum.Held, 0, len(locks))
	at := make([]int, 0, len(locks)) // where each sendable lock is in locks
	for i, l := range locks {
		keys, err := k.keysToken([]string{l.Key}, l.Token)
		if err != nil {
			out[i].Err = err
			continue
		}
		sendable = append(sendable, quorum.Held{Key: keys[0], Token: l.Token})
		at = append(at, i)
	}
	if len(sendable) > 0 {
		for j, renewed := range r.RenewFields(ctx, ttl, sendable) {
			out[at[j]] = renewed
		}
	}
	return out
}
