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

func (s *Server) newKeyspace(prefix string) *keyspace {
	return &keyspace{locks: s.locks, prefix: prefix, maxKey: s.cfg.MaxKeyBytes, maxToken: s.cfg.MaxTokenBytes,
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

// keyToken checks and prefixes key and checks token.
func (k *keyspace) keyToken(key, token string) (string, error) {
	key, err := k.key(key)
	if err == nil {
		err = k.token(token)
	}
	return key, err
}

func (k *keyspace) Acquire(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error) {
	key, err := k.keyToken(key, token)
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.Acquire(ctx, key, token, ttl)
}

func (k *keyspace) Release(ctx context.Context, key, token string) (quorum.Result, error) {
	key, err := k.keyToken(key, token)
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.Release(ctx, key, token)
}

func (k *keyspace) Extend(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error) {
	key, err := k.keyToken(key, token)
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.Extend(ctx, key, token, ttl)
}

func (k *keyspace) Get(ctx context.Context, key string) (string, error) {
	key, err := k.key(key)
	if err != nil {
		return "", err
	}
	return k.locks.Get(ctx, key)
}

func (k *keyspace) PTTL(ctx context.Context, key string) (time.Duration, error) {
	key, err := k.key(key)
	if err != nil {
		return 0, err
	}
	return k.locks.PTTL(ctx, key)
}

func (k *keyspace) Exists(ctx context.Context, key string) (bool, error) {
	key, err := k.key(key)
	if err != nil {
		return false, err
	}
	return k.locks.Exists(ctx, key)
}

func (k *keyspace) Delete(ctx context.Context, key string) (bool, error) {
	key, err := k.key(key)
	if err != nil {
		return false, err
	}
	return k.locks.Delete(ctx, key)
}

func (k *keyspace) Expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	key, err := k.key(key)
	if err != nil {
		return false, err
	}
	return k.locks.Expire(ctx, key, ttl)
}

// MaxTTL is the Locker's; the unauthenticated keyspace has none.
func (k *keyspace) MaxTTL() time.Duration {
	if k.locks == nil {
		return 0
	}
	return k.locks.MaxTTL()
}

func (k *keyspace) AcquireAll(ctx context.Context, keys []string, token string, ttl time.Duration) (quorum.Result, error) {
	keys, err := k.keys(keys)
	if err == nil {
		err = k.token(token)
	}
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.AcquireAll(ctx, keys, token, ttl)
}

func (k *keyspace) ReleaseAll(ctx context.Context, keys []string, token string) (quorum.Result, error) {
	keys, err := k.keys(keys)
	if err == nil {
		err = k.token(token)
	}
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.ReleaseAll(ctx, keys, token)
}

func (k *keyspace) ExtendAll(ctx context.Context, keys []string, token string, ttl time.Duration) (quorum.Result, error) {
	keys, err := k.keys(keys)
	if err == nil {
		err = k.token(token)
	}
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.ExtendAll(ctx, keys, token, ttl)
}

func (k *keyspace) ExtendBy(ctx context.Context, key, token string, add time.Duration) (quorum.Result, error) {
	key, err := k.keyToken(key, token)
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.ExtendBy(ctx, key, token, add)
}

func (k *keyspace) ExtendOrAcquire(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error) {
	key, err := k.keyToken(key, token)
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.ExtendOrAcquire(ctx, key, token, ttl)
}

func (k *keyspace) AcquireOrRenew(ctx context.Context, key, value string, tokenLen int, ttl time.Duration) (quorum.Result, error) {
	key, err := k.keyToken(key, value)
	if err != nil {
		return quorum.Result{}, err
	}
	return k.locks.AcquireOrRenew(ctx, key, value, tokenLen, ttl)
}

func (k *keyspace) OwnerPTTL(ctx context.Context, key, token string) (time.Duration, error) {
	key, err := k.keyToken(key, token)
	if err != nil {
		return 0, err
	}
	return k.locks.OwnerPTTL(ctx, key, token)
}
