package proxy

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// python-redis-lock waits for a held lock:<name> in BLPOP lock-signal:<name>,
// a list its release script pushes one element to. Through lockproxy no
// backend's list means anything (each holds its own copy, and a blocked
// BLPOP on one backend would never hear a release that went to the
// others), so BLPOP of a signal list is served by meaning: the caller
// waits in the engine's line for lock:<name> and gets the element the
// release would have pushed once the lock is free, whichever proxy
// released it. Any other BLPOP is refused: lockproxy keeps no lists.

// Python-redis-lock's names: the lock key and its waiters' signal list.
const (
	lockPrefix   = "lock:"
	signalPrefix = "lock-signal:"
	// signalElement is what the release script pushes (LPUSH signal 1).
	signalElement = "1"
)

// Redis's own errors for a blocking command's timeout.
var (
	errTimeoutNotFloat = &argError{"ERR timeout is not a float or out of range"}
	errTimeoutNegative = &argError{"ERR timeout is negative"}
)

// blpopReq is a parsed BLPOP lock-signal:<name> timeout.
type blpopReq struct {
	signal string        // the list named, answered back as Redis does
	lock   string        // lock:<name>, whose release the signal stands for
	wait   time.Duration // 0: without end
}

// parseBLPop parses BLPOP key [key ...] timeout. The timeout is checked
// first, as Redis does, so that a bad one gets Redis's error whatever the
// keys.
func parseBLPop(args [][]byte) (blpopReq, error) {
	wait, err := parseBlockTimeout(args[len(args)-1])
	if err != nil {
		return blpopReq{}, err
	}
	keys := args[1 : len(args)-1]
	if len(keys) != 1 {
		return blpopReq{}, errorf("ERR lockproxy serves BLPOP of one key, python-redis-lock's lock-signal:<name>, as a wait for the release of lock:<name> (got %d keys)", len(keys))
	}
	name, ok := strings.CutPrefix(string(keys[0]), signalPrefix)
	if !ok {
		return blpopReq{}, errorf("ERR lockproxy serves BLPOP only of python-redis-lock's lock-signal:<name>, as a wait for the release of lock:<name>; it keeps no lists")
	}
	return blpopReq{signal: string(keys[0]), lock: lockPrefix + name, wait: wait}, nil
}

// parseBlockTimeout reads a blocking command's timeout in seconds as Redis
// 7's getTimeoutFromObjectOrReply does: a float as strtold reads it
// (hexadecimal too, but no NaN), rounded up to whole milliseconds, so that
// 0.0001 waits 1 ms and -0.0001 is 0, without end. A value too large for
// C's long long in milliseconds converts to its most negative value there,
// hence "negative" for 1e16 and inf.
func parseBlockTimeout(arg []byte) (time.Duration, error) {
	s := string(arg)
	digits := strings.TrimLeft(s, "+-")
	if (strings.HasPrefix(digits, "0x") || strings.HasPrefix(digits, "0X")) && !strings.ContainsAny(digits, "pP") {
		s += "p0" // strtold's hexadecimal needs no exponent; Go's does
	}
	f, err := strconv.ParseFloat(s, 64)
	if (err != nil && !errors.Is(err, strconv.ErrRange)) || math.IsNaN(f) || strings.Contains(s, "_") {
		return 0, errTimeoutNotFloat
	}
	ms := math.Ceil(f * 1000)
	if ms < 0 || ms >= math.MaxInt64 {
		return 0, errTimeoutNegative
	}
	return time.Duration(min(ms, float64(math.MaxInt64/time.Millisecond))) * time.Millisecond, nil
}

// handleBLPop serves BLPOP lock-signal:<name> timeout: the array [signal,
// "1"] once lock:<name> is free (released or deleted through any proxy,
// run out, or not held at all), the nil array when the timeout passed
// first. The caller then tries SET NX itself, as after a real BLPOP.
func (s *Server) handleBLPop(conn redcon.Conn, cmd redcon.Command) {
	req, err := parseBLPop(cmd.Args)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	ctx, stop := s.waitContext(conn)
	defer stop()
	_, err = space(conn).Read(ctx, quorum.Read{Op: quorum.OpAwaitRelease, Key: req.lock, Wait: req.wait})
	switch {
	case err == nil:
		conn.WriteArray(2)
		conn.WriteBulkString(req.signal)
		conn.WriteBulkString(signalElement)
	case errors.Is(err, quorum.ErrTimeout):
		writeNullArray(conn)
	case ctx.Err() != nil && s.closing.Load():
		s.writeError(conn, errShuttingDown)
	case ctx.Err() != nil:
		// The client went away: nobody reads this.
		writeNullArray(conn)
	default:
		s.writeError(conn, err)
	}
}
