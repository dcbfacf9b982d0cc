package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lockproxy/lockproxy/internal/hashslot"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// argError is an error reply caused by the request itself. Its text is sent
// as it is, so it starts with an upper-case code, as every Redis error does.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func errorf(format string, a ...any) *argError { return &argError{fmt.Sprintf(format, a...)} }

// Redis's own replies, word for word (checked against redis-server 7.0.15),
// so that clients which compare error texts behave as against one Redis.
var (
	errSyntax      = &argError{"ERR syntax error"}
	errNotInteger  = &argError{"ERR value is not an integer or out of range"}
	errNoAuth      = &argError{"NOAUTH Authentication required."}
	errWrongPass   = &argError{"WRONGPASS invalid username-password pair or user is disabled."}
	errNoPassword  = &argError{"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"}
	errHelloNoAuth = &argError{"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"}
	errNoProto     = &argError{"NOPROTO unsupported protocol version"}
	errNoScript    = &argError{"NOSCRIPT No matching script. Please use EVAL."}
	errDBIndex     = &argError{"ERR DB index is out of range"}
	errClientName  = &argError{"ERR Client names cannot contain spaces, newlines or special characters."}
)

// errShuttingDown answers a command that arrived after Shutdown began.
var errShuttingDown = &argError{"ERR lockproxy is shutting down"}

func errArity(name string) *argError {
	return errorf("ERR wrong number of arguments for '%s' command", name)
}

func errExpireTime(cmd string) *argError {
	return errorf("ERR invalid expire time in '%s' command", cmd)
}

// errUnknownCommand words the reply as Redis 7 does: at most 128 bytes of
// the name, then each argument quoted while fewer than 128 bytes were quoted.
func errUnknownCommand(args [][]byte) *argError {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", truncate(a, 128-b.Len()))
	}
	return errorf("ERR unknown command '%s', with args beginning with: %s", truncate(args[0], 128), b.String())
}

func errUnknownSubcommand(cmd, sub []byte) *argError {
	return errorf("ERR unknown subcommand '%s'. Try %s HELP.", truncate(sub, 128), strings.ToUpper(string(cmd)))
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// writeError is the only caller of conn.WriteError: every error reply the
// proxy sends is decided here.
func (s *Server) writeError(conn redcon.Conn, err error) {
	conn.WriteError(s.errorText(err))
}

// errorText maps err to the text of its error reply. A backend's own error
// text is never sent: MOVED, ASK or READONLY in it would make clients
// redirect or retry.
func (s *Server) errorText(err error) string {
	var (
		arg *argError
		nq  *quorum.NoQuorumError
		ttl *quorum.TTLError
		big *ttlTooLong
	)
	switch {
	case errors.As(err, &arg):
		return arg.msg
	case errors.Is(err, context.Canceled) && s.ctx.Err() != nil:
		return "NOQUORUM request cancelled: lockproxy is shutting down"
	case errors.As(err, &nq):
		s.log.Debug("proxy: no quorum", "err", err)
		return noQuorumText(nq)
	case errors.As(err, &ttl):
		return ttlText(ttl)
	case errors.As(err, &big):
		return fmt.Sprintf("ERR invalid expire time: %s exceeds max_ttl %d ms", big.asked, s.locks.MaxTTL().Milliseconds())
	case errors.Is(err, hashslot.ErrCrossSlot):
		return hashslot.ErrCrossSlot.Error()
	case errors.Is(err, quorum.ErrReservedKey):
		return "ERR keys starting with " + quorum.ReservedPrefix + " are lockproxy's own"
	// NOQUORUM, not TRYAGAIN or CLUSTERDOWN: go-redis retries those by
	// itself, and a lock client must see at once that nothing was decided.
	case errors.Is(err, quorum.ErrNoQuorum):
		return "NOQUORUM too few backends answered"
	default:
		s.log.Error("proxy: internal error", "err", err)
		return "ERR internal error"
	}
}

// noQuorumText names only counts and our own words for each backend's
// failure (NoQuorumError.Reason): never a backend's error text.
func noQuorumText(e *quorum.NoQuorumError) string { return "NOQUORUM " + e.Reason() }

func ttlText(e *quorum.TTLError) string {
	if e.TTL <= 0 {
		return fmt.Sprintf("ERR invalid expire time: %d ms is not positive", e.TTL.Milliseconds())
	}
	return fmt.Sprintf("ERR invalid expire time: %d ms exceeds max_ttl %d ms", e.TTL.Milliseconds(), e.Max.Milliseconds())
}
