package proxy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"
)

// compatVersion is the Redis version the proxy answers as, in HELLO and
// INFO: its commands and error texts are those of Redis 7.0.15.
const compatVersion = "7.0.15"

// connState is what one client connection negotiated. Only that
// connection's goroutine touches it.
type connState struct {
	id      int64
	proto   int      // 2 or 3
	user    *account // nil until authenticated
	name    string
	db      int // SELECT's: its keys are apart from the others' (keyspace.go)
	libName string
	libVer  string
	// early are the commands of the current pipeline started ahead of
	// their turn, in order (pipeline.go).
	early []*early
	// fencing is set by CLIENT FENCING ON: an acquisition by
	// LOCK.ACQUIRE answers its fencing token instead of +OK (fence.go).
	fencing bool
	// tx is the transaction under way: watched keys, MULTI's queue
	// (multi.go). Nil when there is none.
	tx *txState
	// sub is the connection's subscriptions (pubsub.go), from its first
	// SUBSCRIBE or PSUBSCRIBE on. Nil before.
	sub *subscriber
	// sessions is the connection's session-bound locks (session.go), from
	// its first on. Nil before.
	sessions *connSessions
	// tracker is the connection's CLIENT TRACKING (tracking.go), from its
	// first CLIENT TRACKING ON on. Nil before.
	tracker *tracker
}

func state(conn redcon.Conn) *connState {
	if st, ok := conn.Context().(*connState); ok {
		return st
	}
	st := &connState{proto: 2}
	conn.SetContext(st)
	return st
}

// handlePing serves PING [message].
func (s *Server) handlePing(conn redcon.Conn, cmd redcon.Command) {
	if len(cmd.Args) <= 2 && subscribed(conn) != nil && state(conn).proto == 2 {
		// In RESP2's subscribed mode a reply is a pub/sub frame, as
		// Redis sends it: ["pong", message or ""].
		msg := []byte{}
		if len(cmd.Args) == 2 {
			msg = cmd.Args[1]
		}
		conn.WriteArray(2)
		conn.WriteBulkString("pong")
		conn.WriteBulk(msg)
		return
	}
	switch len(cmd.Args) {
	case 1:
		conn.WriteString("PONG")
	case 2:
		conn.WriteBulk(cmd.Args[1])
	default:
		s.writeError(conn, errArity("ping"))
	}
}

// handleEcho serves ECHO message.
func (s *Server) handleEcho(conn redcon.Conn, cmd redcon.Command) {
	conn.WriteBulk(cmd.Args[1])
}

// handleQuit serves QUIT: +OK, then the connection is closed. The commands
// the client wrote after it are dropped, as redis-server drops them: a lock
// taken after QUIT would be one the client never hears of. None of them has
// started ahead of its turn (pipeline.go): QUIT is not concurrent, so
// startAhead stops before it.
func (s *Server) handleQuit(conn redcon.Conn, _ redcon.Command) {
	conn.ReadPipeline()
	conn.WriteString("OK")
	conn.Close()
}

// handleReset serves RESET: the connection is as if it had just connected.
func (s *Server) handleReset(conn redcon.Conn, _ redcon.Command) {
	st := state(conn)
	if st.sub != nil {
		st.sub.dropAll() // without replies, as Redis's RESET
	}
	if st.tracker != nil {
		s.tracking.stop(st.tracker) // as Redis's RESET
	}
	// Session locks stay the connection's: they end with it, not with RESET.
	*st = connState{id: st.id, proto: 2, user: s.settings().users.anonymous, sessions: st.sessions}
	conn.WriteString("RESET")
}

// handleSelect serves SELECT n for Redis's 16 default databases, each a
// key space of its own (keyspace.go); a cluster node has database 0 only,
// as Redis Cluster.
func (s *Server) handleSelect(conn redcon.Conn, cmd redcon.Command) {
	n, ok := parseInt(cmd.Args[1])
	switch {
	case !ok || n < math.MinInt32 || n > math.MaxInt32:
		s.writeError(conn, errNotInteger)
	case n != 0 && s.cluster != nil:
		s.writeError(conn, errorf("ERR SELECT is not allowed in cluster mode"))
	case n < 0 || n >= numDBs:
		s.writeError(conn, errDBIndex)
	default:
		state(conn).db = int(n)
		conn.WriteString("OK")
	}
}

// handleAuth serves AUTH [username] password. A failed AUTH leaves the
// connection as it was, authenticated or not, as in Redis.
func (s *Server) handleAuth(conn redcon.Conn, cmd redcon.Command) {
	args := cmd.Args
	if len(args) > 3 {
		s.writeError(conn, errSyntax)
		return
	}
	user, legacy := defaultUser, len(args) == 2
	if !legacy {
		user = string(args[1])
	}
	a, err := s.settings().users.authenticate(user, args[len(args)-1], legacy)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	state(conn).user = a
	conn.WriteString("OK")
}

// helloReq is a parsed HELLO [protover [AUTH username password] [SETNAME name]].
type helloReq struct {
	proto      int // 0: keep the current one
	user, pass []byte
	auth       bool
	name       *string
}

func parseHello(args [][]byte) (helloReq, error) {
	var req helloReq
	if len(args) >= 2 {
		v, ok := parseInt(args[1])
		if !ok {
			return req, &argError{"ERR Protocol version is not an integer or out of range"}
		}
		if v != 2 && v != 3 {
			return req, errNoProto
		}
		req.proto = int(v)
	}
	for i := 2; i < len(args); i++ {
		more := len(args) - 1 - i
		switch opt := strings.ToLower(string(args[i])); {
		case opt == "auth" && more >= 2:
			req.auth, req.user, req.pass = true, args[i+1], args[i+2]
			i += 2
		case opt == "setname" && more >= 1:
			name := string(args[i+1])
			if !validClientName(name) {
				return req, errClientName
			}
			req.name = &name
			i++
		default:
			return req, errorf("ERR Syntax error in HELLO option '%s'", args[i])
		}
	}
	return req, nil
}

// handleHello serves HELLO: it authenticates, names the connection and
// switches its protocol, then replies the server map in the new protocol.
func (s *Server) handleHello(conn redcon.Conn, cmd redcon.Command) {
	req, err := parseHello(cmd.Args)
	st := state(conn)
	if err == nil && req.auth {
		var a *account
		if a, err = s.settings().users.authenticate(string(req.user), req.pass, false); err == nil {
			st.user = a
		}
	}
	if err == nil && st.user == nil {
		err = errHelloNoAuth
	}
	if err != nil {
		s.writeError(conn, err)
		return
	}
	if req.name != nil {
		st.name = *req.name
	}
	if req.proto != 0 {
		st.proto = req.proto
		if st.sub != nil {
			st.sub.proto.Store(int32(req.proto)) // its next messages
		}
	}
	writeMapLen(conn, 7)
	for _, kv := range [][2]string{{"server", "redis"}, {"version", compatVersion}} {
		conn.WriteBulkString(kv[0])
		conn.WriteBulkString(kv[1])
	}
	conn.WriteBulkString("proto")
	conn.WriteInt(st.proto)
	conn.WriteBulkString("id")
	conn.WriteInt64(st.id)
	for _, kv := range [][2]string{{"mode", "standalone"}, {"role", "master"}} {
		conn.WriteBulkString(kv[0])
		conn.WriteBulkString(kv[1])
	}
	conn.WriteBulkString("modules")
	conn.WriteArray(0)
}

// validClientName is Redis's rule: printable ASCII without spaces.
func validClientName(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] < '!' || name[i] > '~' {
			return false
		}
	}
	return true
}

// handleClientSetName serves CLIENT SETNAME name ("" clears it).
func (s *Server) handleClientSetName(conn redcon.Conn, cmd redcon.Command) {
	name := string(cmd.Args[2])
	if !validClientName(name) {
		s.writeError(conn, errClientName)
		return
	}
	state(conn).name = name
	conn.WriteString("OK")
}

// handleClientGetName serves CLIENT GETNAME: the name, or null when unset.
func (s *Server) handleClientGetName(conn redcon.Conn, _ redcon.Command) {
	if name := state(conn).name; name != "" {
		conn.WriteBulkString(name)
		return
	}
	writeNull(conn)
}

// handleClientID serves CLIENT ID.
func (s *Server) handleClientID(conn redcon.Conn, _ redcon.Command) {
	conn.WriteInt64(state(conn).id)
}

// handleClientSetInfo serves CLIENT SETINFO LIB-NAME|LIB-VER value.
func (s *Server) handleClientSetInfo(conn redcon.Conn, cmd redcon.Command) {
	st, val := state(conn), string(cmd.Args[3])
	switch strings.ToLower(string(cmd.Args[2])) {
	case "lib-name":
		st.libName = val
	case "lib-ver":
		st.libVer = val
	default:
		s.writeError(conn, errorf("ERR Unrecognized option '%s'", cmd.Args[2]))
		return
	}
	conn.WriteString("OK")
}

// handleClientInfo serves CLIENT INFO: a subset of Redis's fields.
func (s *Server) handleClientInfo(conn redcon.Conn, _ redcon.Command) {
	st := state(conn)
	conn.WriteBulkString(fmt.Sprintf("id=%d addr=%s name=%s db=%d resp=%d lib-name=%s lib-ver=%s\n",
		st.id, conn.RemoteAddr(), st.name, st.db, st.proto, st.libName, st.libVer))
}

// handleCommand serves the bare COMMAND with an empty array: clients call
// it only to learn key positions for cluster routing, which has no use here.
func (s *Server) handleCommand(conn redcon.Conn, _ redcon.Command) {
	names := slices.Sorted(maps.Keys(s.cmds))
	conn.WriteArray(len(names))
	for _, name := range names {
		writeCommandInfo(conn, s.cmds[name])
	}
}

// handleCommandInfo serves COMMAND INFO [name ...]: each command's entry,
// or nil for one not served; every command with no names.
func (s *Server) handleCommandInfo(conn redcon.Conn, cmd redcon.Command) {
	if len(cmd.Args) == 2 {
		s.handleCommand(conn, cmd)
		return
	}
	conn.WriteArray(len(cmd.Args) - 2)
	for _, name := range cmd.Args[2:] {
		if c := s.cmds[strings.ToLower(string(name))]; c != nil {
			writeCommandInfo(conn, c)
		} else {
			writeNullArray(conn)
		}
	}
}

// writeCommandInfo writes c's entry as COMMAND does in Redis 7: name,
// arity, flags, first key, last key, step (what cluster-mode clients read
// to find a command's keys), then ACL categories, tips, key
// specifications and subcommands, empty (redis-py's RESP3 parser reads
// them).
func writeCommandInfo(conn redcon.Conn, c *command) {
	conn.WriteArray(10)
	conn.WriteBulkString(c.name)
	conn.WriteInt(c.arity)
	conn.WriteArray(len(c.flags))
	for _, f := range c.flags {
		conn.WriteString(f)
	}
	conn.WriteInt(c.keys.first)
	conn.WriteInt(c.keys.last)
	conn.WriteInt(c.keys.step)
	for range 4 {
		conn.WriteArray(0)
	}
}

// handleCommandGetKeys serves COMMAND GETKEYS command [arg ...]: the keys
// that command would act on.
func (s *Server) handleCommandGetKeys(conn redcon.Conn, cmd redcon.Command) {
	args := cmd.Args[2:]
	c, err := s.lookup(args)
	if err != nil {
		s.writeError(conn, errorf("ERR Invalid command specified"))
		return
	}
	keys := commandKeys(c, args)
	if len(keys) == 0 {
		s.writeError(conn, errorf("ERR The command has no key arguments"))
		return
	}
	conn.WriteArray(len(keys))
	for _, k := range keys {
		conn.WriteBulk(k)
	}
}

// handleCommandCount serves COMMAND COUNT: how many commands are served.
func (s *Server) handleCommandCount(conn redcon.Conn, _ redcon.Command) {
	conn.WriteInt(len(s.cmds))
}

// handleCommandList serves COMMAND LIST (filters are ignored).
func (s *Server) handleCommandList(conn redcon.Conn, _ redcon.Command) {
	conn.WriteArray(len(s.cmds))
	for name := range s.cmds {
		conn.WriteBulkString(name)
	}
}

// handleCommandDocs serves COMMAND DOCS with an empty map.
func (s *Server) handleCommandDocs(conn redcon.Conn, _ redcon.Command) {
	writeMapLen(conn, 0)
}

// handleConfigGet serves CONFIG GET with an empty map: no backend setting
// is exposed, and clients that probe settings fall back to defaults.
func (s *Server) handleConfigGet(conn redcon.Conn, _ redcon.Command) {
	writeMapLen(conn, 0)
}

// handleTime serves TIME: unix seconds and microseconds, as bulk strings.
func (s *Server) handleTime(conn redcon.Conn, _ redcon.Command) {
	now := time.Now()
	conn.WriteArray(2)
	conn.WriteBulkString(strconv.FormatInt(now.Unix(), 10))
	conn.WriteBulkString(strconv.Itoa(now.Nanosecond() / 1000))
}
