// Package proxy is lockproxy's RESP front end: it speaks the Redis protocol
// (RESP2, and RESP3 to connections that ask for it with HELLO 3) to unchanged
// Redis clients, parses their lock commands and scripts, makes one request
// of a Locker per lock operation, and encodes the answer as Redis would.
//
// It knows nothing of Redlock arithmetic: quorum sizes, validity and drift
// belong to the Locker (shard.Groups over quorum's engines, whose requests
// name a quorum.Op). A Server is safe for concurrent use; it serves each
// client connection in a goroutine of its own, with redcon's Conn
// interface, parser and reply encoders.
//
// Where things are:
//   - locker.go: the Locker, the seam to the engine (Lock, Unlock, Read,
//     Write, Renew); what else the proxy needs of the engine comes in
//     Config, required: a BackendReporter (info.go), a ReleaseWatcher
//     (pubsub.go) and a Lister (inspect.go), all of them shard.Groups in
//     production. keyspace.go wraps the Locker, the watcher and the lister
//     per user (key prefix, limits); session.go's sessionLocker,
//     tracking.go's trackedLocker and observe.go's observedLocker wrap the
//     Locker once for the server (session locks released, tracked keys
//     changed, counts for INFO and metrics), each in one method per
//     request, so that a new operation needs nothing of them.
//   - Serving: server.go (Server, New, Serve, Shutdown), reload.go (new
//     limits and users on SIGHUP), client.go (the connection loop, its
//     buffers and write deadline), guard.go (RESP framing and request
//     limits), pipeline.go (pipelined lock commands run together), push.go
//     (messages to a subscribed connection at any time).
//   - commands.go: the command table (name, arity, handler); the handlers
//     are in set.go and keys.go (lock commands), wait.go (LOCK.ACQUIRE's
//     wait), fence.go (FENCE), scripts.go (EVAL, EVALSHA, SCRIPT),
//     multi.go (MULTI/EXEC/WATCH), conn.go (connection chatter), help.go
//     (HELP), auth.go (users), info.go (INFO), inspect.go (LOCK.LIST,
//     SCAN, KEYS, DBSIZE, FLUSHDB), cluster.go (cluster mode).
//   - The lock libraries' ways of waiting and holding: scripts_library.go
//     (their lock scripts, a row each, recognised by internal/luaform,
//     which reads Lua as Redis's Lua 5.1 does) and scripts_run.go (what
//     each row runs), redisson.go (Redisson's RLock), rwlock.go (its
//     RReadWriteLock), session.go (locks
//     that live with the connection), pubsub.go and channels.go (unlock
//     channels), blpop.go (python-redis-lock's signal lists), tracking.go
//     (client-side caching).
//   - reply.go: the one mapping of errors to RESP replies; resp.go: replies.
//
// A new lock command is a row in commands.go and a handler that makes one
// request of the Locker; a new library script is a row in
// scripts_library.go. A new lock operation is a quorum.Op and its engine
// code, then one of those.
package proxy
