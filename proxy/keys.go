package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// handleGet serves GET key: the value a quorum holds, or null.
func (s *Server) handleGet(conn redcon.Conn, cmd redcon.Command) {
	ctx := s.ctx
	key := string(cmd.Args[1])
	if s.fencing {
		if name, ok := redissonTokenLock(key); ok {
			s.replyRedissonToken(conn, name)
			return
		}
	}
	r, err := space(conn).Read(ctx, quorum.Read{Op: quorum.OpGet, Key: key})
	switch {
	case err == nil:
		noteRead(conn, key, r.Value, true)
		conn.WriteBulkString(r.Value)
	case errors.Is(err, quorum.ErrNotFound):
		noteRead(conn, key, "", false)
		writeNull(conn)
	default:
		s.writeError(conn, err)
	}
}

// handleHExists serves HEXISTS key field for hash locks (Redisson's
// isHeldByCurrentThread): 1 when a quorum has the owner's field.
func (s *Server) handleHExists(conn redcon.Conn, cmd redcon.Command) {
	r, err := space(conn).Read(s.ctx, quorum.Read{Op: quorum.OpHashExists, Key: string(cmd.Args[1]), Token: string(cmd.Args[2])})
	if err != nil {
		s.writeError(conn, err)
		return
	}
	writeBool(conn, r.Exists)
}

// handleHGet serves HGET key field for hash locks (Redisson's
// getHoldCount): the owner's holds that a quorum counts at least, as a
// bulk string, or null when a quorum does not have the field. HGET key
// mode is a read-write lock's mode (RWriteLock.isLocked()), "read" or
// "write": no owner's field is named "mode".
func (s *Server) handleHGet(conn redcon.Conn, cmd redcon.Command) {
	key, field := string(cmd.Args[1]), string(cmd.Args[2])
	req := quorum.Read{Op: quorum.OpHashCount, Key: key, Token: field}
	if field == rwModeField {
		req = quorum.Read{Op: quorum.OpRWMode, Key: key}
	}
	r, err := space(conn).Read(s.ctx, req)
	switch {
	case err == nil && req.Op == quorum.OpRWMode:
		conn.WriteBulkString(r.Value)
	case err == nil:
		conn.WriteBulkString(strconv.FormatInt(r.Count, 10))
	case errors.Is(err, quorum.ErrNotFound):
		writeNull(conn)
	default:
		s.writeError(conn, err)
	}
}

// handlePTTL serves PTTL key: milliseconds left, -2 when absent, -1 when
// the key has no expiry.
func (s *Server) handlePTTL(conn redcon.Conn, cmd redcon.Command) {
	s.replyTTL(conn, cmd, time.Millisecond)
}

// handleTTL serves TTL key: seconds left, rounded as Redis rounds them.
func (s *Server) handleTTL(conn redcon.Conn, cmd redcon.Command) {
	s.replyTTL(conn, cmd, time.Second)
}

func (s *Server) replyTTL(conn redcon.Conn, cmd redcon.Command, unit time.Duration) {
	ctx := s.ctx
	ks := space(conn)
	key := string(cmd.Args[1])
	r, err := ks.Read(ctx, quorum.Read{Op: quorum.OpPTTL, Key: key})
	switch {
	case err == nil && unexpiring(ks, key):
		conn.WriteInt(-1)
	case err == nil:
		ms := max(r.TTL.Milliseconds(), 0)
		if unit == time.Second {
			ms = (ms + 500) / 1000
		}
		conn.WriteInt64(ms)
	case errors.Is(err, quorum.ErrNotFound):
		conn.WriteInt(-2)
	case errors.Is(err, quorum.ErrNoExpiry):
		conn.WriteInt(-1)
	default:
		s.writeError(conn, err)
	}
}

// unexpiring reports whether key, as a client of ks named it, is a session
// lock of this proxy asked without a TTL.
func unexpiring(ks *keyspace, key string) bool {
	_, ok := ks.unexpiringBy(key)
	return ok
}

// handleExists serves EXISTS key [key ...]: how many of the keys exist on
// a quorum, a key named twice counting twice, as in Redis.
func (s *Server) handleExists(conn redcon.Conn, cmd redcon.Command) {
	locks := space(conn)
	s.countKeys(conn, cmd.Args[1:], func(ctx context.Context, key string) (bool, error) {
		r, err := locks.Read(ctx, quorum.Read{Op: quorum.OpExists, Key: key})
		return r.Exists, err
	})
}

// handleDel serves DEL key [key ...] and UNLINK, which differs on one
// Redis only in freeing memory later: an unconditional (administrative)
// delete; the reply counts the keys that existed on a quorum.
func (s *Server) handleDel(conn redcon.Conn, cmd redcon.Command) {
	s.countKeys(conn, cmd.Args[1:], deleter(space(conn)))
}

// deleter deletes a key through locks, whoever holds it.
func deleter(locks Locker) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, key string) (bool, error) {
		return locks.Write(ctx, quorum.Write{Op: quorum.OpDelete, Key: key})
	}
}

// countKeys makes one Locker call per key, each under its own timeout, and
// replies how many returned true. The first error is the reply: past it the
// count would not be an answer. A key too long refuses the whole command
// before any key is acted on.
func (s *Server) countKeys(conn redcon.Conn, keys [][]byte, call func(context.Context, string) (bool, error)) {
	if err := space(conn).checkKeys(keys); err != nil {
		s.writeError(conn, err)
		return
	}
	n := 0
	for _, k := range keys {
		ok, err := s.callKey(call, string(k))
		if err != nil {
			s.writeError(conn, err)
			return
		}
		if ok {
			n++
		}
	}
	conn.WriteInt(n)
}

func (s *Server) callKey(call func(context.Context, string) (bool, error), key string) (bool, error) {
	ctx := s.ctx
	return call(ctx, key)
}

// handlePExpire serves PEXPIRE key ms: :1 when set on a quorum, else :0.
func (s *Server) handlePExpire(conn redcon.Conn, cmd redcon.Command) {
	s.expire(conn, cmd, false)
}

// handleExpire serves EXPIRE key seconds.
func (s *Server) handleExpire(conn redcon.Conn, cmd redcon.Command) {
	s.expire(conn, cmd, true)
}

func (s *Server) expire(conn redcon.Conn, cmd redcon.Command, seconds bool) {
	ttl, err := parseExpire(cmd.Args, seconds)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	if ttl == 0 {
		s.countKeys(conn, cmd.Args[1:2], deleter(space(conn)))
		return
	}
	ctx := s.ctx
	ok, err := space(conn).Write(ctx, quorum.Write{Op: quorum.OpExpire, Key: string(cmd.Args[1]), TTL: ttl})
	if err != nil {
		s.writeError(conn, err)
		return
	}
	writeBool(conn, ok)
}

// parseExpire parses [P]EXPIRE key ttl [option], options before the TTL as
// Redis checks them. A TTL ≤ 0 makes Redis delete the key: it is 0, which
// the caller carries out as DEL (a client may release that way).
func parseExpire(args [][]byte, seconds bool) (time.Duration, error) {
	name := strings.ToLower(string(args[0]))
	for _, a := range args[3:] {
		switch opt := strings.ToUpper(string(a)); opt {
		case "NX", "XX", "GT", "LT":
			return 0, errorf("ERR lockproxy does not support %s options: %s key ttl (got %s)", strings.ToUpper(name), strings.ToUpper(name), opt)
		default:
			return 0, errorf("ERR Unsupported option %s", a)
		}
	}
	if n, ok := parseInt(args[2]); ok && n <= 0 {
		return 0, nil
	}
	return parseTTL(args[2], seconds, name)
}

// handleDelEx serves DELEX key IFEQ token (Redis 8.4): release, :1 or :0;
// and DELEX key, an unconditional DEL of one key.
func (s *Server) handleDelEx(conn redcon.Conn, cmd redcon.Command) {
	args := cmd.Args
	if len(args) == 2 {
		s.countKeys(conn, args[1:], deleter(space(conn)))
		return
	}
	cond := ""
	if len(args) == 4 {
		cond = strings.ToUpper(string(args[2]))
	}
	switch cond {
	case "IFEQ":
		s.releaseLock(conn, string(args[1]), string(args[3]))
	case "IFNE", "IFDEQ", "IFDNE":
		s.writeError(conn, errorf("ERR lockproxy only takes DELEX key IFEQ token (got %s)", cond))
	default:
		s.writeError(conn, errSyntax)
	}
}

// handleDelIfEq serves DELIFEQ key token (Valkey 9): release, :1 or :0.
func (s *Server) handleDelIfEq(conn redcon.Conn, cmd redcon.Command) {
	s.releaseLock(conn, string(cmd.Args[1]), string(cmd.Args[2]))
}

// releaseLock deletes key where token holds it: :1 released, :0 not held.
func (s *Server) releaseLock(conn redcon.Conn, key, token string) {
	ctx := s.ctx
	_, err := space(conn).Unlock(ctx, quorum.Unlock{Op: quorum.OpRelease, Keys: []string{key}, Token: token})
	switch {
	case err == nil:
		conn.WriteInt(1)
	case errors.Is(err, quorum.ErrNotHeld):
		conn.WriteInt(0)
	default:
		s.writeError(conn, err)
	}
}
