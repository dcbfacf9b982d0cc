package proxy

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Optimistic transactions, for the lock recipes that release or extend a
// lock with one: StackExchange.Redis's LockRelease and LockExtend (on a
// server older than 8.4, as the proxy says it is) and redis-py's WATCH
// recipe send
//
//	WATCH key · GET key · MULTI · DEL key | PEXPIRE key ms | ... · EXEC
//
// and on one Redis, EXEC runs the DEL only if nobody changed the key since
// the GET read the holder's token. Over a quorum there is no WATCH to
// forward: each backend would watch on its own connection, and a majority
// of them running the DEL is not atomic with the GET. But the meaning of
// the whole is one compare-and-delete (or compare-and-pexpire) with the
// token read, which the engine does atomically on each backend and by
// quorum overall. So MULTI, the queueing and the errors are served as
// Redis serves them, and EXEC runs that one lock operation: its array of
// results when a quorum still held the token, the nil array (as for a
// watched key that changed) when it did not, NOQUORUM when it cannot tell.
// A transaction of one lock command and no WATCH runs that command. Any
// other transaction is refused at EXEC, with nothing done anywhere.

// Bounds on what one connection keeps for a transaction: a lock recipe
// watches one key and queues one command.
const (
	maxWatched     = 16
	maxQueued      = 16
	maxQueuedBytes = 64 << 10 // of arguments: a lock command is a few short strings
)

// txState is a connection's transaction: what it watches, and what MULTI
// queued. It is nil on a connection that is in neither.
type txState struct {
	watched map[string]*watchedKey
	multi   bool
	// aborted is set when a command was refused while queueing: EXEC then
	// discards the transaction, as Redis does.
	aborted bool
	queued  [][][]byte // the queued commands' arguments, copied
	bytes   int        // their size
}

// watchedKey is what the last GET of a watched key answered.
type watchedKey struct {
	read    bool // a GET since the WATCH answered
	present bool // and found the key, holding value
	value   string
}

// Redis's replies, word for word.
var (
	errNestedMulti  = &argError{"ERR MULTI calls can not be nested"}
	errExecNoMulti  = &argError{"ERR EXEC without MULTI"}
	errDiscardMulti = &argError{"ERR DISCARD without MULTI"}
	errWatchInMulti = &argError{"ERR WATCH inside MULTI is not allowed"}
	errExecAbort    = &argError{"EXECABORT Transaction discarded because of previous errors."}
)

// inMulti reports whether conn is queueing commands.
func inMulti(st *connState) bool { return st.tx != nil && st.tx.multi }

// queueCommand queues cmd for EXEC and replies +QUEUED. Only commands that
// exist with their arity checked get here, as in Redis.
func (s *Server) queueCommand(conn redcon.Conn, st *connState, cmd redcon.Command) {
	size := 0
	for _, a := range cmd.Args {
		size += len(a)
	}
	if len(st.tx.queued) == maxQueued || st.tx.bytes+size > maxQueuedBytes {
		st.tx.aborted = true
		s.writeError(conn, errorf("ERR lockproxy queues at most %d commands of %d KiB in all in a transaction", maxQueued, maxQueuedBytes>>10))
		return
	}
	args := make([][]byte, len(cmd.Args))
	for i, a := range cmd.Args {
		args[i] = append([]byte(nil), a...)
	}
	st.tx.queued = append(st.tx.queued, args)
	st.tx.bytes += size
	conn.WriteString("QUEUED")
}

// handleWatch serves WATCH key [key ...].
func (s *Server) handleWatch(conn redcon.Conn, cmd redcon.Command) {
	st := state(conn)
	if inMulti(st) {
		s.writeError(conn, errWatchInMulti)
		return
	}
	if err := space(conn).checkKeys(cmd.Args[1:]); err != nil {
		s.writeError(conn, err)
		return
	}
	if st.tx == nil {
		st.tx = &txState{}
	}
	if st.tx.watched == nil {
		st.tx.watched = map[string]*watchedKey{}
	}
	for _, k := range cmd.Args[1:] {
		if _, ok := st.tx.watched[string(k)]; ok {
			continue // as in Redis, watching a key again changes nothing
		}
		if len(st.tx.watched) == maxWatched {
			s.writeError(conn, errorf("ERR lockproxy watches at most %d keys per connection", maxWatched))
			return
		}
		st.tx.watched[string(k)] = &watchedKey{}
	}
	conn.WriteString("OK")
}

// handleUnwatch serves UNWATCH (inside MULTI it is queued, as in Redis).
func (s *Server) handleUnwatch(conn redcon.Conn, _ redcon.Command) {
	state(conn).tx = nil
	conn.WriteString("OK")
}

// handleMulti serves MULTI.
func (s *Server) handleMulti(conn redcon.Conn, _ redcon.Command) {
	st := state(conn)
	if inMulti(st) {
		s.writeError(conn, errNestedMulti)
		return
	}
	if st.tx == nil {
		st.tx = &txState{}
	}
	st.tx.multi = true
	conn.WriteString("OK")
}

// handleDiscard serves DISCARD: the queue and the watched keys are dropped.
func (s *Server) handleDiscard(conn redcon.Conn, _ redcon.Command) {
	st := state(conn)
	if !inMulti(st) {
		s.writeError(conn, errDiscardMulti)
		return
	}
	st.tx = nil
	conn.WriteString("OK")
}

// noteRead records what a GET of key answered, when key is watched.
func noteRead(conn redcon.Conn, key string, value string, present bool) {
	st := state(conn)
	if st.tx == nil || st.tx.multi {
		return
	}
	if w := st.tx.watched[key]; w != nil {
		*w = watchedKey{read: true, present: present, value: value}
	}
}

// lockTx is a transaction understood as a lock operation.
type lockTx struct {
	key, token string
	release    bool // DEL; else an extension to ttl
	ttl        time.Duration
	okReply    bool // the queued command answers +OK (SET), not :1
}

// handleExec serves EXEC: the transaction runs as one lock operation, or
// is refused, and either way the connection watches nothing afterwards.
func (s *Server) handleExec(conn redcon.Conn, _ redcon.Command) {
	st := state(conn)
	if !inMulti(st) {
		s.writeError(conn, errExecNoMulti)
		return
	}
	tx := st.tx
	st.tx = nil
	switch {
	case tx.aborted:
		s.writeError(conn, errExecAbort)
		return
	case len(tx.queued) == 0:
		conn.WriteArray(0)
		return
	case len(tx.watched) == 0 && len(tx.queued) == 1 && s.execAlone(conn, st, tx.queued[0]):
		return
	case len(tx.watched) == 0 && s.execReads(conn, st, tx.queued):
		return
	}
	op, err := lockShape(tx)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	ctx := s.ctx
	locks := space(conn)
	if op.release {
		_, err = locks.Unlock(ctx, quorum.Unlock{Op: quorum.OpRelease, Keys: []string{op.key}, Token: op.token})
	} else {
		_, err = locks.Lock(ctx, quorum.Lock{Op: quorum.OpExtend, Keys: []string{op.key}, Token: op.token, TTL: op.ttl})
	}
	switch {
	case err == nil:
		conn.WriteArray(1)
		if op.okReply {
			conn.WriteString("OK")
		} else {
			conn.WriteInt(1)
		}
	case errors.Is(err, quorum.ErrNotHeld):
		writeNullArray(conn) // the token no longer held the key: as a watched key that changed
	default:
		s.writeError(conn, err)
	}
}

// execReads runs a transaction of reads alone (rueidis's cached read:
// MULTI, PTTL k, GET k, EXEC): each runs in turn, and EXEC answers their
// replies in an array, errors included. Each answers what a quorum held
// when it ran; they are not atomic together, as on one Redis: a PTTL and
// a GET of a lock may see a release between them. It reports false,
// having done nothing, when one of them is no read.
func (s *Server) execReads(conn redcon.Conn, st *connState, queued [][][]byte) bool {
	cmds := make([]*command, len(queued))
	for i, args := range queued {
		c, err := s.lookup(args)
		if err != nil || !c.concurrent || !slices.Contains(c.flags, "readonly") {
			return false
		}
		cmds[i] = c
	}
	var out []byte
	for i, c := range cmds {
		rec := &replyBuffer{delegate: delegate{conn}, state: *st}
		c.run(rec, redcon.Command{Args: queued[i]})
		out = append(out, rec.out...)
	}
	conn.WriteArray(len(cmds))
	conn.WriteRaw(out)
	return true
}

// execAlone runs a transaction of one lock command and no WATCH (a client
// library that wraps every command in MULTI/EXEC): one command is atomic
// by itself, so EXEC answers its reply in an array of one, an error reply
// included, as Redis does. It reports false, having done nothing, for a
// command that changes more than its keys (HELLO, AUTH, ...).
func (s *Server) execAlone(conn redcon.Conn, st *connState, args [][]byte) bool {
	c, err := s.lookup(args)
	if err != nil || !c.concurrent {
		return false
	}
	rec := &replyBuffer{delegate: delegate{conn}, state: *st}
	c.run(rec, redcon.Command{Args: args})
	conn.WriteArray(1)
	conn.WriteRaw(rec.out)
	return true
}

// lockShape reads the transaction as a release or an extension of the
// lock whose token the GET under WATCH read, or says why it is not one.
func lockShape(tx *txState) (lockTx, error) {
	if len(tx.queued) != 1 {
		return lockTx{}, errTxShape("%d commands queued", len(tx.queued))
	}
	args := tx.queued[0]
	name := strings.ToLower(string(args[0]))
	if len(args) < 2 {
		return lockTx{}, errTxShape("%s", strings.ToUpper(name))
	}
	if name == "blpop" {
		// Redis runs BLPOP in a transaction without blocking, which here
		// would only say whether lock:<name> is free this instant: a caller
		// of python-redis-lock never sends it, and one who does is told.
		return lockTx{}, errorf("ERR lockproxy serves BLPOP only outside MULTI, where it waits for the lock; nothing was done")
	}
	key := string(args[1])
	w := tx.watched[key]
	switch {
	case w == nil:
		return lockTx{}, errTxShape("%s of a key not watched", strings.ToUpper(name))
	case len(tx.watched) != 1:
		return lockTx{}, errTxShape("%d keys watched", len(tx.watched))
	case !w.read:
		return lockTx{}, errTxShape("no GET of the watched key after WATCH")
	case !w.present:
		return lockTx{}, errTxShape("the GET under WATCH found no lock")
	}
	op := lockTx{key: key, token: w.value}
	switch name {
	case "del", "unlink":
		if len(args) != 2 {
			return lockTx{}, errTxShape("DEL of %d keys", len(args)-1)
		}
		op.release = true
	case "pexpire", "expire":
		ttl, err := parseExpire(args, name == "expire")
		if err != nil {
			return lockTx{}, err
		}
		op.ttl, op.release = ttl, ttl == 0
	case "set":
		req, opt, _, err := parseSetOptions(args)
		switch {
		case err != nil:
			return lockTx{}, err
		case opt[setCondition] != "" && opt[setCondition] != "xx", opt[setGet] != "",
			opt[setExpiry] != "px" && opt[setExpiry] != "ex":
			return lockTx{}, errTxShape("SET with options other than PX or EX ttl (and XX)")
		case req.token != w.value:
			return lockTx{}, errTxShape("SET of another value than the one read: only the holder's own token can extend")
		}
		op.ttl, op.okReply = req.ttl, true
	default:
		return lockTx{}, errTxShape("%s", strings.ToUpper(name))
	}
	return op, nil
}

func errTxShape(format string, a ...any) *argError {
	return errorf("ERR lockproxy runs a transaction only as a lock operation: WATCH key, GET key, MULTI, then one DEL key, PEXPIRE key ms, EXPIRE key s or SET key <the value read> PX|EX ttl, EXEC; nothing was done (got "+format+")", a...)
}
