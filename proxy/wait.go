package proxy

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Waiting for a lock, for new code: LOCK.ACQUIRE parks the caller while
// another token holds the key, in line behind this proxy's earlier
// waiters, and answers when the lock is taken or the wait is over; the
// engine tries again when the key is released through any proxy, or its
// holder's time runs out, instead of the client polling with SET NX. A
// client that goes away while it waits leaves the line at once.

// lockAcquireReq is a parsed LOCK.ACQUIRE key token PX ms|EX s [WAIT ms].
type lockAcquireReq struct {
	key, token string
	ttl        time.Duration
	wait       time.Duration // 0: none; negative: without end (WAIT 0)
}

func parseLockAcquire(args [][]byte) (lockAcquireReq, error) {
	req := lockAcquireReq{key: string(args[1]), token: string(args[2])}
	seen := map[string]bool{}
	for i := 3; i < len(args); i += 2 {
		opt := strings.ToLower(string(args[i]))
		if seen[opt] || i+1 == len(args) || (opt == "px" && seen["ex"]) || (opt == "ex" && seen["px"]) {
			return req, errSyntax
		}
		seen[opt] = true
		switch opt {
		case "px", "ex":
			ttl, err := parseTTL(args[i+1], opt == "ex", "lock.acquire")
			if err != nil {
				return req, err
			}
			req.ttl = ttl
		case "wait":
			ms, ok := parseInt(args[i+1])
			switch {
			case !ok:
				return req, errorf("ERR WAIT is not an integer or out of range")
			case ms < 0:
				return req, errorf("ERR WAIT is negative")
			case ms == 0:
				req.wait = -1
			default:
				req.wait = time.Duration(min(ms, int64(time.Duration(1<<62)/time.Millisecond))) * time.Millisecond
			}
		default:
			return req, errSyntax
		}
	}
	if req.ttl == 0 {
		return req, errorf("ERR LOCK.ACQUIRE needs PX or EX: a lock without a TTL never expires")
	}
	return req, nil
}

// handleLockAcquire serves LOCK.ACQUIRE key token PX ms|EX s [WAIT ms]:
// +OK (or the fencing token, after CLIENT FENCING ON) when taken, null
// when the wait ended first (or at once without WAIT). WAIT 0 waits
// without end, as BLPOP's 0 does.
func (s *Server) handleLockAcquire(conn redcon.Conn, cmd redcon.Command) {
	req, err := parseLockAcquire(cmd.Args)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	ctx := s.ctx
	if req.wait != 0 {
		var stop func()
		ctx, stop = s.waitContext(conn)
		defer stop()
	}
	r, err := space(conn).Lock(ctx, quorum.Lock{Op: quorum.OpAcquire, Keys: []string{req.key}, Token: req.token, TTL: req.ttl, Wait: req.wait})
	switch {
	case err == nil && state(conn).fencing && r.Fence > 0:
		conn.WriteInt64(r.Fence)
	case err == nil:
		conn.WriteString("OK")
	case errors.Is(err, quorum.ErrNotAcquired):
		writeNull(conn)
	case ctx.Err() != nil && s.closing.Load():
		s.writeError(conn, errShuttingDown)
	case ctx.Err() != nil:
		// The client went away: nobody reads this.
		writeNull(conn)
	default:
		s.writeError(conn, err)
	}
}

// waitContext is the context of a command that may wait long: it ends
// when the client closes its side of the connection, and when the proxy
// shuts down. stop must be called before the connection reads again.
func (s *Server) waitContext(conn redcon.Conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(s.ctx)
	go func() {
		select {
		case <-s.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	watchStop := func() {}
	if c, ok := conn.(*client); ok {
		watchStop = c.watchGone(cancel)
	}
	return ctx, func() {
		watchStop()
		cancel()
	}
}
