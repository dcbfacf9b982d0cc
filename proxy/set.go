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

// setReq is a parsed SET: a lock acquisition, SET key token NX PX|EX ttl,
// or without a TTL a session-bound one, SET key token NX (session.go); or
// with extend, a lock extension, SET key token IFEQ token PX|EX ttl.
type setReq struct {
	key, token string
	ttl        time.Duration // 0: session-bound
	extend     bool
}

// SET's options fall in groups of which Redis takes at most one each;
// repeating the same option is allowed, and the last value wins.
const (
	setCondition = iota // NX XX IFEQ IFNE IFDEQ IFDNE
	setExpiry           // EX PX EXAT PXAT KEEPTTL
	setGet              // GET
	setGroups
)

var setOptions = map[string]struct {
	group int
	value bool // takes the next argument
}{
	"nx": {setCondition, false}, "xx": {setCondition, false},
	"ifeq": {setCondition, true}, "ifne": {setCondition, true},
	"ifdeq": {setCondition, true}, "ifdne": {setCondition, true},
	"ex": {setExpiry, true}, "px": {setExpiry, true},
	"exat": {setExpiry, true}, "pxat": {setExpiry, true},
	"keepttl": {setExpiry, false},
	"get":     {setGet, false},
}

// parseSet parses SET key value [options] as Redis 7 and 8.4 do (syntax,
// then the expiry value), then keeps only the two lock shapes.
func parseSet(args [][]byte) (setReq, error) {
	req, opt, cmp, err := parseSetOptions(args)
	if err != nil {
		return setReq{}, err
	}
	return checkSetShape(req, opt, cmp)
}

// parseSetOptions parses SET key value [options] as Redis does: the
// options given, by group, the value IFEQ compares with, and the TTL.
func parseSetOptions(args [][]byte) (req setReq, opt [setGroups]string, cmp string, err error) {
	if len(args) < 3 {
		return setReq{}, opt, "", errArity("set")
	}
	var val [setGroups][]byte
	for i := 3; i < len(args); i++ {
		name := strings.ToLower(string(args[i]))
		o, ok := setOptions[name]
		if !ok || (opt[o.group] != "" && opt[o.group] != name) || (o.value && i+1 == len(args)) {
			return setReq{}, opt, "", errSyntax
		}
		if o.value {
			i++
			val[o.group] = args[i]
		}
		opt[o.group] = name
	}
	req = setReq{key: string(args[1]), token: string(args[2])}
	if val[setExpiry] != nil {
		var ttl time.Duration
		var err error
		if at := opt[setExpiry]; at == "exat" || at == "pxat" {
			ttl, err = ttlUntil(val[setExpiry], at == "exat")
		} else {
			ttl, err = parseTTL(val[setExpiry], at == "ex", "set")
		}
		if err != nil {
			return setReq{}, opt, "", err
		}
		req.ttl = ttl
	}
	return req, opt, string(val[setCondition]), nil
}

// now is the clock that EXAT, PXAT and PEXPIREAT are read against; the
// tests that check exact TTLs stop it.
var now = time.Now

// ttlUntil reads EXAT's or PXAT's Unix time (rueidislock's SET NX PXAT)
// as the TTL from now on this proxy's clock, as one Redis reads it on its
// own. A time already past, which Redis takes and expires at once, is
// refused: no lock can be granted with no time left.
func ttlUntil(arg []byte, seconds bool) (time.Duration, error) {
	n, ok := parseInt(arg)
	switch {
	case !ok:
		return 0, errNotInteger
	case n <= 0, seconds && n > math.MaxInt64/1000:
		return 0, errExpireTime("set")
	}
	if seconds {
		n *= 1000
	}
	ttl, err := untilMillis(n)
	if err == nil && ttl <= 0 {
		err = errExpireTime("set")
	}
	return ttl, err
}

// untilMillis is the TTL from now until the Unix time at (ms): not
// positive for a time past.
func untilMillis(at int64) (time.Duration, error) {
	ms := at - now().UnixMilli()
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return 0, &ttlTooLong{asked: strconv.FormatInt(at, 10) + " ms from the epoch"}
	}
	return time.Duration(max(ms, 0)) * time.Millisecond, nil
}

// checkSetShape refuses what is not a lock: XX, GET or KEEPTTL ignore
// ownership. A lock without a TTL, which on one Redis never expires when
// its holder dies, is taken session-bound.
func checkSetShape(req setReq, opt [setGroups]string, cmp string) (setReq, error) {
	switch {
	case opt[setCondition] == "":
		return setReq{}, errSetShape("SET without NX")
	case opt[setCondition] != "nx" && opt[setCondition] != "ifeq":
		return setReq{}, errSetShape(strings.ToUpper(opt[setCondition]))
	case opt[setGet] != "":
		return setReq{}, errSetShape("GET")
	case opt[setExpiry] == "keepttl":
		return setReq{}, errSetShape(strings.ToUpper(opt[setExpiry]))
	case opt[setExpiry] == "" && opt[setCondition] == "ifeq":
		return setReq{}, errSetShape("IFEQ without PX or EX: an extension sets a TTL")
	case opt[setCondition] == "ifeq" && cmp != req.token:
		return setReq{}, errSetShape("IFEQ with a new value: only the holder's own token can extend")
	}
	req.extend = opt[setCondition] == "ifeq"
	return req, nil
}

func errSetShape(got string) *argError {
	return errorf("ERR lockproxy only takes locks: SET key token NX PX|EX ttl, or SET key token IFEQ token PX|EX ttl to extend (got %s)", got)
}

// handleSet serves SET key token NX PX|EX ttl (acquire: +OK, or null when
// held elsewhere) and SET key token IFEQ token PX|EX ttl (extend: +OK, or
// null when not held), as Redis 8.4 replies to IFEQ.
func (s *Server) handleSet(conn redcon.Conn, cmd redcon.Command) {
	req, err := parseSet(cmd.Args)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	ctx := s.ctx
	op := quorum.OpAcquire
	if req.extend {
		op = quorum.OpExtend
	}
	if op == quorum.OpAcquire && (req.ttl == 0 || s.sessionBound(conn, req.key)) {
		_, err = s.acquireSession(ctx, conn, req.key, req.token, 0, req.ttl == 0)
	} else {
		_, err = space(conn).Lock(ctx, quorum.Lock{Op: op, Keys: []string{req.key}, Token: req.token, TTL: req.ttl})
	}
	// OK whatever CLIENT FENCING says: a stock client's typed SET reads an
	// integer there as a failure (redis-py's False, go-redis's SetNX false
	// for any token but 1) and would leak the lock it took.
	switch {
	case err == nil:
		conn.WriteString("OK")
	case errors.Is(err, quorum.ErrNotAcquired), errors.Is(err, quorum.ErrNotHeld):
		writeNull(conn) // contention is not an error
	default:
		s.writeError(conn, err)
	}
}

// handleSetNX serves SETNX key token (:1 taken, :0 held elsewhere). The
// legacy recipe sets the TTL with a following PEXPIRE; until then the lock
// is session-bound (session.go), so that a client dying in between cannot
// leave it forever, and one that never sets a TTL holds it while its
// connection lives.
func (s *Server) handleSetNX(conn redcon.Conn, cmd redcon.Command) {
	_, err := s.acquireSession(s.ctx, conn, string(cmd.Args[1]), string(cmd.Args[2]), 0, true)
	switch {
	case err == nil:
		conn.WriteInt(1)
	case errors.Is(err, quorum.ErrNotAcquired):
		conn.WriteInt(0)
	default:
		s.writeError(conn, err)
	}
}
