package proxy

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"
)

// command is one entry of the dispatch table.
type command struct {
	name   string // lower case; "client|setname" for a subcommand, as Redis names it in errors
	arity  int    // Redis's convention: n means exactly n arguments, -n at least n (the name counts)
	noAuth bool   // served before AUTH: AUTH, HELLO, QUIT and RESET as in Redis, and PING
	// unqueued commands run at once inside MULTI, as Redis runs EXEC,
	// DISCARD, MULTI, WATCH, QUIT and RESET; every other is queued.
	unqueued bool
	// concurrent commands change nothing but their keys, and may run at
	// once with others of a pipeline on other keys (pipeline.go).
	concurrent bool
	// subscribed commands are the ones RESP2's subscribed mode allows
	// (pubsub.go); RESP3 allows every command.
	subscribed bool
	// keys are where its keys are, as COMMAND tells cluster-mode clients
	// that route by them; EVAL and EVALSHA count theirs (movablekeys).
	keys keySpec
	// flags are what COMMAND tells of it; cluster clients read write,
	// readonly, movablekeys and pubsub.
	flags []string
	run   func(redcon.Conn, redcon.Command)
	subs  map[string]*command // subcommands, keyed in lower case
}

// keySpec is Redis's first key, last key (negative: from the end) and
// step; all zero for a command without keys.
type keySpec struct{ first, last, step int }

var (
	oneKey  = keySpec{1, 1, 1}
	allKeys = keySpec{1, -1, 1}

	write       = []string{"write"}
	readonly    = []string{"readonly"}
	movablekeys = []string{"movablekeys"}
	pubsubFlag  = []string{"pubsub"}
)

// commandKeys are the keys that args of c name.
func commandKeys(c *command, args [][]byte) [][]byte {
	if slices.Contains(c.flags, "movablekeys") { // EVAL script numkeys key ...
		n, ok := parseInt(args[2])
		if !ok || n < 0 || int(n) > len(args)-3 {
			return nil
		}
		return args[3 : 3+n]
	}
	k := c.keys
	if k.step == 0 {
		return nil
	}
	last := k.last
	if last < 0 {
		last += len(args)
	}
	var out [][]byte
	for i := k.first; i <= last && i < len(args); i += k.step {
		out = append(out, args[i])
	}
	return out
}

// newCommands builds the dispatch table: every command the proxy answers.
// Nothing else is forwarded anywhere.
func (s *Server) newCommands() map[string]*command {
	return withHelp(table(
		&command{name: "set", keys: oneKey, flags: write, concurrent: true, arity: -3, run: s.handleSet},
		&command{name: "setnx", keys: oneKey, flags: write, concurrent: true, arity: 3, run: s.handleSetNX},
		&command{name: "get", keys: oneKey, flags: readonly, concurrent: true, arity: 2, run: s.handleGet},
		&command{name: "pttl", keys: oneKey, flags: readonly, concurrent: true, arity: 2, run: s.handlePTTL},
		&command{name: "ttl", keys: oneKey, flags: readonly, concurrent: true, arity: 2, run: s.handleTTL},
		&command{name: "hexists", keys: oneKey, flags: readonly, concurrent: true, arity: 3, run: s.handleHExists},
		&command{name: "hget", keys: oneKey, flags: readonly, concurrent: true, arity: 3, run: s.handleHGet},
		&command{name: "exists", keys: allKeys, flags: readonly, concurrent: true, arity: -2, run: s.handleExists},
		&command{name: "del", keys: allKeys, flags: write, concurrent: true, arity: -2, run: s.handleDel},
		&command{name: "unlink", keys: allKeys, flags: write, concurrent: true, arity: -2, run: s.handleDel},
		&command{name: "pexpire", keys: oneKey, flags: write, concurrent: true, arity: -3, run: s.handlePExpire},
		&command{name: "expire", keys: oneKey, flags: write, concurrent: true, arity: -3, run: s.handleExpire},
		&command{name: "delex", keys: oneKey, flags: write, concurrent: true, arity: -2, run: s.handleDelEx},
		&command{name: "delifeq", keys: oneKey, flags: write, concurrent: true, arity: 3, run: s.handleDelIfEq},
		&command{name: "fence", keys: oneKey, flags: readonly, concurrent: true, arity: 3, run: s.handleFence},
		&command{name: "lock.acquire", keys: oneKey, flags: write, arity: -4, run: s.handleLockAcquire},
		&command{name: "lock.list", flags: readonly, arity: -2, run: s.handleLockList},
		&command{name: "scan", flags: readonly, arity: -2, run: s.handleScan},
		&command{name: "keys", flags: readonly, arity: 2, run: s.handleKeys},
		&command{name: "dbsize", flags: readonly, arity: 1, run: s.handleDBSize},
		&command{name: "flushdb", flags: write, arity: -1, run: s.handleFlush},
		&command{name: "flushall", flags: write, arity: -1, run: s.handleFlush},
		&command{name: "blpop", keys: keySpec{1, -2, 1}, flags: write, arity: -3, run: s.handleBLPop},
		&command{name: "eval", flags: movablekeys, concurrent: true, arity: -3, run: s.handleEval},
		&command{name: "evalsha", flags: movablekeys, concurrent: true, arity: -3, run: s.handleEvalSHA},
		&command{name: "script", arity: -2, subs: table(
			&command{name: "script|load", arity: 3, run: s.handleScriptLoad},
			&command{name: "script|exists", arity: -3, run: s.handleScriptExists},
			&command{name: "script|flush", arity: -2, run: s.handleScriptFlush},
		)},
		&command{name: "watch", keys: allKeys, arity: -2, unqueued: true, run: s.handleWatch},
		&command{name: "unwatch", arity: 1, run: s.handleUnwatch},
		&command{name: "multi", arity: 1, unqueued: true, run: s.handleMulti},
		&command{name: "exec", arity: 1, unqueued: true, run: s.handleExec},
		&command{name: "discard", arity: 1, unqueued: true, run: s.handleDiscard},
		&command{name: "subscribe", flags: pubsubFlag, arity: -2, subscribed: true, run: s.handleSubscribe},
		&command{name: "psubscribe", flags: pubsubFlag, arity: -2, subscribed: true, run: s.handleSubscribe},
		&command{name: "unsubscribe", flags: pubsubFlag, arity: -1, subscribed: true, run: s.handleUnsubscribe},
		&command{name: "punsubscribe", flags: pubsubFlag, arity: -1, subscribed: true, run: s.handleUnsubscribe},
		&command{name: "publish", flags: pubsubFlag, arity: 3, run: s.handlePublish},
		&command{name: "ping", arity: -1, noAuth: true, subscribed: true, run: s.handlePing},
		&command{name: "echo", arity: 2, run: s.handleEcho},
		&command{name: "quit", arity: -1, noAuth: true, unqueued: true, subscribed: true, run: s.handleQuit},
		&command{name: "reset", arity: 1, noAuth: true, unqueued: true, subscribed: true, run: s.handleReset},
		&command{name: "hello", arity: -1, noAuth: true, run: s.handleHello},
		&command{name: "auth", arity: -2, noAuth: true, run: s.handleAuth},
		&command{name: "select", arity: 2, run: s.handleSelect},
		&command{name: "client", arity: -2, subs: table(
			&command{name: "client|setname", arity: 3, run: s.handleClientSetName},
			&command{name: "client|getname", arity: 2, run: s.handleClientGetName},
			&command{name: "client|id", arity: 2, run: s.handleClientID},
			&command{name: "client|info", arity: 2, run: s.handleClientInfo},
			&command{name: "client|setinfo", arity: 4, run: s.handleClientSetInfo},
			&command{name: "client|maint_notifications", arity: -3, run: replyOK},
			&command{name: "client|capa", arity: -3, run: replyOK},
			&command{name: "client|fencing", arity: 3, run: s.handleClientFencing},
			&command{name: "client|tracking", arity: -3, run: s.handleClientTracking},
			&command{name: "client|caching", arity: 3, run: s.handleClientCaching},
			&command{name: "client|getredir", arity: 2, run: s.handleClientGetRedir},
			&command{name: "client|trackinginfo", arity: 2, run: s.handleClientTrackingInfo},
		)},
		&command{name: "command", arity: -1, run: s.handleCommand, subs: table(
			&command{name: "command|count", arity: 2, run: s.handleCommandCount},
			&command{name: "command|list", arity: -2, run: s.handleCommandList},
			&command{name: "command|docs", arity: -2, run: s.handleCommandDocs},
			&command{name: "command|info", arity: -2, run: s.handleCommandInfo},
			&command{name: "command|getkeys", arity: -4, run: s.handleCommandGetKeys},
		)},
		&command{name: "info", arity: -1, run: s.handleInfo},
		&command{name: "time", arity: 1, run: s.handleTime},
		&command{name: "config", arity: -2, subs: table(
			&command{name: "config|get", arity: -3, run: s.handleConfigGet},
		)},
		&command{name: "cluster", arity: -2, subs: table(
			&command{name: "cluster|slots", arity: 2, run: s.clusterCommand(s.handleClusterSlots)},
			&command{name: "cluster|shards", arity: 2, run: s.clusterCommand(s.handleClusterShards)},
			&command{name: "cluster|nodes", arity: 2, run: s.clusterCommand(s.handleClusterNodes)},
			&command{name: "cluster|info", arity: 2, run: s.clusterCommand(s.handleClusterInfo)},
			&command{name: "cluster|myid", arity: 2, run: s.clusterCommand(s.handleClusterMyID)},
			&command{name: "cluster|myshardid", arity: 2, run: s.clusterCommand(s.handleClusterMyID)},
			&command{name: "cluster|keyslot", arity: 3, run: s.clusterCommand(s.handleClusterKeySlot)},
			&command{name: "cluster|countkeysinslot", arity: 3, run: s.clusterCommand(s.handleClusterNoListing)},
			&command{name: "cluster|getkeysinslot", arity: 4, run: s.clusterCommand(s.handleClusterNoListing)},
		)},
		&command{name: "readonly", arity: 1, run: s.clusterCommand(s.handleClusterOK)},
		&command{name: "readwrite", arity: 1, run: s.clusterCommand(s.handleClusterOK)},
		&command{name: "asking", arity: 1, run: s.clusterCommand(s.handleClusterOK)},
	))
}

// table indexes commands by their own (last) name.
func table(cmds ...*command) map[string]*command {
	m := make(map[string]*command, len(cmds))
	for _, c := range cmds {
		m[c.name[strings.LastIndexByte(c.name, '|')+1:]] = c
	}
	return m
}

// serveRESP gates and dispatches one command of conn.
// Checks run in Redis's order: unknown command, arity, then authentication.
func (s *Server) serveRESP(conn redcon.Conn, cmd redcon.Command) {
	s.stats.commands.Add(1)
	if s.finishAhead(conn, cmd) {
		return
	}
	if !s.begin() {
		s.writeError(conn, errShuttingDown)
		s.flushIfClosing(conn)
		return
	}
	defer s.end(conn)
	st := state(conn)
	if st.sessions != nil && st.sessions.tellLost(conn) {
		return
	}
	c, err := s.lookup(cmd.Args)
	if err == nil && !c.noAuth && st.user == nil {
		err = errNoAuth
	}
	if err == nil && !c.subscribed && st.proto == 2 && subscribed(conn) != nil {
		err = errorf("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", c.name)
	}
	if err == nil {
		err = s.crossSlot(c, cmd.Args)
	}
	if err == nil && c.name == "exec" && inMulti(st) {
		err = s.txCrossSlot(st.tx.queued)
	}
	if err != nil {
		if inMulti(st) {
			st.tx.aborted = true // a refusal while queueing makes EXEC fail, as in Redis
		}
		if strings.EqualFold(string(cmd.Args[0]), "exec") {
			// A refused EXEC discards the transaction, and says so; Redis
			// Cluster's CROSSSLOT says it alone.
			st.tx = nil
			if err != errCrossSlot {
				err = errorf("EXECABORT Transaction discarded because of: %s", strings.TrimPrefix(s.errorText(err), "ERR "))
			}
		}
		s.writeError(conn, err)
		return
	}
	if inMulti(st) && !c.unqueued {
		s.queueCommand(conn, st, cmd)
		return
	}
	if t := st.tracker; t != nil && t.on {
		// Its reads are registered in order, one command at a time.
		defer s.trackCommand(conn, t, c, cmd.Args)()
		c.run(conn, cmd)
		return
	}
	s.startAhead(conn, cmd, c)
	c.run(conn, cmd)
}

// lookup finds the command (or subcommand) args name and checks its arity.
func (s *Server) lookup(args [][]byte) (*command, error) {
	c := s.cmds[strings.ToLower(string(args[0]))]
	if c == nil {
		return nil, errUnknownCommand(args)
	}
	if c.subs != nil && len(args) >= 2 {
		sub := c.subs[strings.ToLower(string(args[1]))]
		if sub == nil {
			return nil, errUnknownSubcommand(args[0], args[1])
		}
		c = sub
	}
	if n := len(args); (c.arity > 0 && n != c.arity) || n < -c.arity || c.run == nil {
		return nil, errArity(c.name)
	}
	return c, nil
}

func replyOK(conn redcon.Conn, _ redcon.Command) { conn.WriteString("OK") }

// parseInt parses a decimal integer exactly as Redis's string2ll does: no
// sign but '-', no leading zeros, no spaces, no overflow.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	switch {
	case neg && n <= math.MaxInt64+1:
		return -int64(n-1) - 1, true
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	}
	return 0, false
}

// parseTTL reads an expiry argument of cmd, in seconds or milliseconds, the
// way Redis 7 checks it: not an integer, not positive, or overflowing when
// converted to milliseconds is an error. A TTL beyond what a Duration holds
// (292 years) is beyond any max_ttl: a *ttlTooLong that names it as asked.
func parseTTL(arg []byte, seconds bool, cmd string) (time.Duration, error) {
	n, ok := parseInt(arg)
	switch {
	case !ok:
		return 0, errNotInteger
	case n <= 0, seconds && n > math.MaxInt64/1000:
		return 0, errExpireTime(cmd)
	}
	ms := n
	if seconds {
		ms *= 1000
	}
	if ms > int64(math.MaxInt64/time.Millisecond) {
		asked := strconv.FormatInt(n, 10) + " ms"
		if seconds {
			asked = strconv.FormatInt(n, 10) + " s"
		}
		return 0, &ttlTooLong{asked: asked}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// ttlTooLong is a TTL asked beyond what a Duration holds, as asked:
// errorText names it beside max_ttl.
type ttlTooLong struct{ asked string }

func (e *ttlTooLong) Error() string { return "ttl " + e.asked + " is too long" }
