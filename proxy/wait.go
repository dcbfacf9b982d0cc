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

// lockAcquireReq is a parsed LOCK.ACQUIRE key token PX ms|EX s|SESSION
// [WAIT ms].
type lockAcquireReq struct {
	key, token string
	ttl        time.Duration // 0: session-bound (SESSION)
	wait       time.Duration // 0: none; negative: without end (WAIT 0)
}

func parseLockAcquire(args [][]byte) (lockAcquireReq, error) {
	req := lockAcquireReq{key: string(args[1]), token: string(args[2])}
	seen := map[string]bool{}
	expiries := 0
	for i := 3; i < len(args); i += 2 {
		opt := strings.ToLower(string(args[i]))
		if opt == "session" {
			if seen[opt] {
				return req, errSyntax
			}
			seen[opt], expiries = true, expiries+1
			i-- // it takes no value
			continue
		}
		if seen[opt] || i+1 == len(args) {
			return req, errSyntax
		}
		seen[opt] = true
		switch opt {
		case "px", "ex":
			expiries++
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
	switch {
	case expiries > 1:
		return req, errSyntax
	case expiries == 0:
		return req, errorf("ERR LOCK.ACQUIRE needs PX, EX or SESSION: a lock without a TTL never expires, and SESSION makes one that lives while this connection does")
	}
	return req, nil
}

// handleLockAcquire serves LOCK.ACQUIRE key token PX ms|EX s|SESSION
// [WAIT ms]: +OK (or the fencing token, after CLIENT FENCING ON) when
// taken, null when the wait ended first (or at once without WAIT). WAIT 0
// waits without end, as BLPOP's 0 does. SESSION takes a session-bound
// lock (session.go).
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
	var r quorum.Result
	if req.ttl == 0 || s.sessionBound(conn, req.key) {
		r, err = s.acquireSession(ctx, conn, req.key, req.token, req.wait, req.ttl == 0)
	} else {
		r, err = space(conn).Lock(ctx, quorum.Lock{Op: quorum.OpAcquire, Keys: []string{req.key}, Token: req.token, TTL: req.ttl, Wait: req.wait})
	}
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
