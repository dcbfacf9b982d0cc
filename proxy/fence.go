package proxy

import (
	"errors"
	"strings"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Fencing tokens, for clients as they are. FENCE key token answers the
// fencing token of the lock token holds, checked against a quorum of the
// backends (not a counter any caller may read, as Redisson's getToken
// is), so a generic command call of any client (go-redis Do, redis-py
// execute_command, Jedis sendCommand, redis-cli) gets it. A client can
// opt in per connection, with CLIENT FENCING ON, to get the token as the
// answer of LOCK.ACQUIRE itself, in one round trip: a command no client
// types, so every client reads its raw reply. SET keeps answering OK,
// which typed clients' SET methods need.

// handleFence serves FENCE key token: the token as an integer; nil when
// token does not hold key on a quorum, or its lock has no fencing token.
func (s *Server) handleFence(conn redcon.Conn, cmd redcon.Command) {
	ctx := s.ctx
	r, err := space(conn).Read(ctx, quorum.Read{Op: quorum.OpFence, Key: string(cmd.Args[1]), Token: string(cmd.Args[2])})
	switch {
	case err == nil:
		conn.WriteInt64(r.Fence)
	case errors.Is(err, quorum.ErrNotHeld), errors.Is(err, quorum.ErrNoFence):
		writeNull(conn)
	default:
		s.writeError(conn, err)
	}
}

// handleClientFencing serves CLIENT FENCING ON|OFF.
func (s *Server) handleClientFencing(conn redcon.Conn, cmd redcon.Command) {
	switch strings.ToUpper(string(cmd.Args[2])) {
	case "ON":
		if !s.fencing {
			s.writeError(conn, errorf("ERR fencing is off: set fencing = true on every lockproxy of this deployment"))
			return
		}
		state(conn).fencing = true
	case "OFF":
		state(conn).fencing = false
	default:
		s.writeError(conn, errSyntax)
		return
	}
	conn.WriteString("OK")
}
