package proxy

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// Locker is what the front end needs from the lock engine: a request per
// kind of decision, each naming its operation (quorum.Op), so that a
// wrapper (the key prefix of keyspace, the session and tracking notices of
// sessionLocker and trackedLocker, the counts of observedLocker, a test
// fake) handles every operation, present and future, in one method per
// kind. Every method returns quorum.ErrNoQuorum (a *quorum.NoQuorumError)
// when too few backends answered to decide, a *quorum.TTLError for a TTL
// outside (0, max_ttl], and the errors the engine documents per operation
// (quorum.Engine's methods of the same names). ctx bounds the wait for the
// backends' votes. What the proxy needs besides lock decisions (INFO's
// backends, pub/sub's releases, listings) comes in Config.
type Locker interface {
	// Lock takes or extends keys for a token. May return
	// quorum.ErrNotAcquired or quorum.ErrNotHeld.
	Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error)
	// Unlock deletes keys a token holds. May return quorum.ErrNotHeld,
	// which is also quorum.ErrAbsent when a quorum answered that the key
	// does not exist at all (redsync tells that apart: -1).
	Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error)
	// Read answers what a quorum holds of a key. May return
	// quorum.ErrNotFound, quorum.ErrNoExpiry or quorum.ErrNotHeld.
	Read(ctx context.Context, req quorum.Read) (quorum.Reading, error)
	// Write deletes a key or sets its TTL whoever holds it, and reports
	// whether a quorum did.
	Write(ctx context.Context, req quorum.Write) (bool, error)
	// Renew renews many locks in one call, a script per backend per batch:
	// the session locks (session.go), or Redisson's hash locks (its
	// watchdog). Each lock has its own outcome, in the order of req.Locks.
	Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed
	// MaxTTL is the longest TTL accepted, which a TTL error names.
	MaxTTL() time.Duration
}

// An engine is a Locker, and so are the engines of shard groups.
var (
	_ Locker = (*quorum.Engine)(nil)
	_ Locker = (*shard.Groups)(nil)
)
