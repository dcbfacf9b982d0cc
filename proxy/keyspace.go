package proxy

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// keyspace is the Locker as one user sees it: every key checked against
// max_key_bytes and prefixed with the user's key prefix, every token
// checked against max_token_bytes, before the call reaches the Locker.
// It implements every method itself, without embedding, so that a method
// added to Locker cannot bypass the prefix. The listings and the releases
// heard are the user's too (inspect.go, pubsub.go): the prefix is applied
// here and nowhere else.
type keyspace struct {
	locks            Locker
	lister           Lister
	watcher          ReleaseWatcher
	prefix           string
	maxKey, maxToken int
	err              error // when set, every key is refused with it
	// scripts are the scripts this user loaded (scripts.go), in every
	// database, as Redis's script cache is.
	scripts *scriptCache
	// db is the database (SELECT) whose keys these are, and dbs the
	// user's keyspace of each database: dbs[0] has the user's prefix
	// alone, dbs[n] adds dbMarker(n).
	db  int
	dbs *[numDBs]*keyspace
	// sessions tells of this proxy's session locks asked without a TTL,
	// which a script reading their TTL sees as -1.
	sessions *sessions
}

var _ Locker = (*keyspace)(nil)

// numDBs is how many databases SELECT takes: Redis's default.
const numDBs = 16

// Databases. SELECT n keeps database n's locks apart from database 0's in
// the proxy's key space rather than the backends' own databases: a key
// of database n is the user's prefix, dbMarker(n), then the key, on
// backend database 0 with every other key, so that fencing counters, set
// records, release notices, waits and session locks work there unchanged.
// The marker starts with a NUL byte, which no lock library puts in a key;
// database 0's listings leave out the keys that carry one, and every
// reply names keys without it.
func dbMarker(n int) string { return "\x00db" + strconv.Itoa(n) + "\x00" }

// dbMarkerStart begins every dbMarker.
const dbMarkerStart = "\x00db"

// splitDB reads the database of a key of database 0's listing that
// another database's marker starts, and the key without it; 0 and key for
// any other.
func splitDB(key string) (int, string) {
	rest, ok := strings.CutPrefix(key, dbMarkerStart)
	if !ok {
		return 0, key
	}
	digits, name, ok := strings.Cut(rest, "\x00")
	n, err := strconv.Atoi(digits)
	if !ok || err != nil || n < 1 || n >= numDBs || dbMarker(n) != dbMarkerStart+digits+"\x00" {
		return 0, key
	}
	return n, name
}

// newKeyspace returns a keyspace under prefix with cfg's limits, database
// 0's, with those of the other databases beside it.
func (s *Server) newKeyspace(prefix string, cfg Config) *keyspace {
	dbs := new([numDBs]*keyspace)
	scripts := newScriptCache(scriptCacheSize)
	for n := range dbs {
		p := prefix
		if n > 0 {
			p += dbMarker(n)
		}
		dbs[n] = &keyspace{locks: s.locks, lister: s.lister, watcher: s.watcher, prefix: p, maxKey: cfg.MaxKeyBytes, maxToken: cfg.MaxTokenBytes,
			scripts: scripts, db: n, dbs: dbs, sessions: s.sessions}
	}
	return dbs[0]
}

// unauthenticated is the keyspace of a connection that has not
// authenticated: it refuses every key. serveRESP never lets such a
// connection reach a lock command; this is the second lock on that door.
var unauthenticated = &keyspace{err: errNoAuth, scripts: newScriptCache(0)}

// space returns the keyspace of the user conn authenticated as, in the
// database it selected.
func space(conn redcon.Conn) *keyspace {
	st := state(conn)
	if u := st.user; u != nil {
		if st.db != 0 {
			return u.locks.dbs[st.db]
		}
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

// unexpiringBy is the token of this proxy's session lock on key (as the
// client named it) that was asked without a TTL, if there is one.
func (k *keyspace) unexpiringBy(key string) (string, bool) {
	full, err := k.key(key)
	if err != nil {
		return "", false
	}
	return k.sessions.unexpiringBy(full)
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

// Renew renews locks under the user's prefix, each key and token checked
// as Lock checks them; one refused answers its own error.
func (k *keyspace) Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed {
	out := make([]quorum.Renewed, len(req.Locks))
	sendable := make([]quorum.Held, 0, len(req.Locks))
	at := make([]int, 0, len(req.Locks)) // where each sendable lock is in req.Locks
	for i, l := range req.Locks {
		keys, err := k.keysToken([]string{l.Key}, l.Token)
		if err != nil {
			out[i].Err = err
			continue
		}
		held := quorum.Held{Key: keys[0], Token: l.Token}
		if l.Prefix != "" {
			if held.Prefix, err = k.key(l.Prefix); err != nil {
				out[i].Err = err
				continue
			}
		}
		sendable = append(sendable, held)
		at = append(at, i)
	}
	if len(sendable) > 0 {
		req.Locks = sendable
		for j, renewed := range k.locks.Renew(ctx, req) {
			out[at[j]] = renewed
		}
	}
	return out
}

// Releases hears the releases of the user's keys that match the glob
// pattern, each named as the user names it (ReleaseWatcher.Releases).
func (k *keyspace) Releases(pattern string, fn func(key, token string)) (stop func()) {
	if k.err != nil {
		return func() {} // no key of it is anyone's
	}
	return k.watcher.Releases(globEscape(k.prefix)+pattern, func(key, token string) {
		if key, ok := strings.CutPrefix(key, k.prefix); ok {
			fn(key, token)
		}
	})
}

// Relay sends message on the user's channel to every proxy's subscribers
// of it (ReleaseWatcher.Relay): the topic is the user's prefix, a NUL,
// and the channel, which relayedTopic reads back.
func (k *keyspace) Relay(ctx context.Context, channel, message string) error {
	if k.err != nil {
		return k.err
	}
	return k.watcher.Relay(ctx, k.prefix+"\x00"+channel, message)
}

// relayedTopic reads the key prefix and the channel of a topic that a
// keyspace's Relay sent, through any proxy.
func relayedTopic(topic string) (prefix, channel string, ok bool) {
	return strings.Cut(topic, "\x00")
}
