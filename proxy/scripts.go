package proxy

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// scriptKind is a lock operation that client libraries send as a Lua
// script. Recognising one more kind is one row in scriptKinds and one run
// function.
type scriptKind struct {
	name       string
	keys, args int      // KEYS and ARGV the script reads; fewer is an error
	bodies     []string // the Lua texts of this kind, compared after normalise
	// run performs the operation with one Locker call and returns what
	// the script returns on one Redis (see writeValue).
	run func(ctx context.Context, l Locker, keys, args []string) (any, error)
}

// scriptKinds lists the recognised scripts.
var scriptKinds = []*scriptKind{
	{
		name: "compare-and-delete", keys: 1, args: 1, run: runCompareAndDelete,
		bodies: ownerGuarded(`redis.call("del", KEYS[1])`, `redis.call("unlink", KEYS[1])`),
	},
	{
		name: "compare-and-pexpire", keys: 1, args: 2, run: runCompareAndPExpire,
		bodies: ownerGuarded(`redis.call("pexpire", KEYS[1], ARGV[2])`),
	},
}

// ownerGuards are the shapes in which libraries write "when KEYS[1] holds
// ARGV[1], do %s and return 1 (or its result), else return 0", after
// normalise has inlined their local variables.
var ownerGuards = []string{
	`if redis.call("get", KEYS[1]) == ARGV[1] then return %s else return 0 end`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then return %s end return 0`,
	`if ARGV[1] == redis.call("get", KEYS[1]) then return %s else return 0 end`,
	`if ARGV[1] == redis.call("get", KEYS[1]) then return %s end return 0`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then %s return 1 else return 0 end`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then %s return 1 end return 0`,
	`if not redis.call("get", KEYS[1]) or redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end %s return 1`,
}

func ownerGuarded(actions ...string) []string {
	var bodies []string
	for _, g := range ownerGuards {
		for _, a := range actions {
			bodies = append(bodies, fmt.Sprintf(g, a))
		}
	}
	return bodies
}

// recognised maps each normal form of scriptKinds' bodies to its kind.
var recognised = func() map[string]*scriptKind {
	m := map[string]*scriptKind{}
	for _, k := range scriptKinds {
		for _, b := range k.bodies {
			m[normalise(b)] = k
		}
	}
	return m
}()

// classify returns the kind of a script, or nil when it is not recognised.
func classify(body []byte) *scriptKind {
	if len(body) > maxRecognisedScript {
		return nil
	}
	return recognised[normalise(string(body))]
}

// runCompareAndDelete releases KEYS[1] held by ARGV[1]: 1, or 0 when not held.
func runCompareAndDelete(ctx context.Context, l Locker, keys, args []string) (any, error) {
	_, err := l.Release(ctx, keys[0], args[0])
	return heldResult(err)
}

// runCompareAndPExpire sets KEYS[1]'s TTL to ARGV[2] ms where ARGV[1] holds it.
func runCompareAndPExpire(ctx context.Context, l Locker, keys, args []string) (any, error) {
	ttl, err := parseTTL([]byte(args[1]), false, "pexpire")
	if err != nil {
		return nil, err
	}
	_, err = l.Extend(ctx, keys[0], args[0], ttl)
	return heldResult(err)
}

// heldResult turns a Release or Extend outcome into the scripts' 1/0.
func heldResult(err error) (any, error) {
	switch {
	case err == nil:
		return int64(1), nil
	case errors.Is(err, quorum.ErrNotHeld):
		return int64(0), nil
	}
	return nil, err
}

// scriptCacheSize bounds the script cache. Only recognised scripts are
// stored, but their whitespace variants are endless.
const scriptCacheSize = 1024

// scriptCache maps SHA1s to recognised kinds, shared by all connections as
// Redis's script cache is. It is safe for concurrent use.
type scriptCache struct {
	mu    sync.Mutex
	max   int
	bySHA map[string]*scriptKind
}

func newScriptCache(max int) *scriptCache {
	return &scriptCache{max: max, bySHA: map[string]*scriptKind{}}
}

func (c *scriptCache) get(sha string) *scriptKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bySHA[sha]
}

// put stores kind under sha. When full it drops an arbitrary entry: a
// client whose script was dropped gets NOSCRIPT and sends it again.
func (c *scriptCache) put(sha string, kind *scriptKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.bySHA[sha]; !ok && len(c.bySHA) >= c.max {
		for old := range c.bySHA {
			delete(c.bySHA, old)
			break
		}
	}
	c.bySHA[sha] = kind
}

func (c *scriptCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.bySHA)
}

func sha1Hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

// load returns the kind of body, stored in the cache under its SHA1.
func (s *Server) load(body []byte) (*scriptKind, error) {
	sha := sha1Hex(body)
	if kind := s.scripts.get(sha); kind != nil {
		return kind, nil
	}
	kind := classify(body)
	if kind == nil {
		return nil, errorf("ERR lockproxy does not run this script (sha1 %s): only recognised lock scripts are served", sha)
	}
	s.scripts.put(sha, kind)
	return kind, nil
}

// evalReq is a parsed EVAL or EVALSHA: numkeys split the rest in KEYS and ARGV.
type evalReq struct {
	keys, args []string
}

// parseEval parses "script numkeys key... arg..." with Redis's errors.
func parseEval(args [][]byte) (evalReq, error) {
	n, ok := parseInt(args[2])
	switch {
	case !ok:
		return evalReq{}, errNotInteger
	case n < 0:
		return evalReq{}, &argError{"ERR Number of keys can't be negative"}
	case n > int64(len(args)-3):
		return evalReq{}, &argError{"ERR Number of keys can't be greater than number of args"}
	}
	rest := make([]string, len(args)-3)
	for i, a := range args[3:] {
		rest[i] = string(a)
	}
	return evalReq{keys: rest[:n], args: rest[n:]}, nil
}

// handleEval serves EVAL script numkeys key... arg... for recognised scripts.
func (s *Server) handleEval(conn redcon.Conn, cmd redcon.Command) {
	req, err := parseEval(cmd.Args)
	var kind *scriptKind
	if err == nil {
		kind, err = s.load(cmd.Args[1])
	}
	if err != nil {
		s.writeError(conn, err)
		return
	}
	s.runScript(conn, kind, req)
}

// handleEvalSHA serves EVALSHA sha numkeys key... arg... from the cache.
func (s *Server) handleEvalSHA(conn redcon.Conn, cmd redcon.Command) {
	req, err := parseEval(cmd.Args)
	var kind *scriptKind
	if err == nil {
		if kind = s.scripts.get(strings.ToLower(string(cmd.Args[1]))); kind == nil {
			err = errNoScript
		}
	}
	if err != nil {
		s.writeError(conn, err)
		return
	}
	s.runScript(conn, kind, req)
}

func (s *Server) runScript(conn redcon.Conn, kind *scriptKind, req evalReq) {
	if len(req.keys) < kind.keys || len(req.args) < kind.args {
		s.writeError(conn, errorf("ERR lockproxy runs this script as %s, which needs %d keys and %d arguments (got %d and %d)",
			kind.name, kind.keys, kind.args, len(req.keys), len(req.args)))
		return
	}
	ctx, cancel := s.requestContext()
	defer cancel()
	v, err := kind.run(ctx, s.locks, req.keys, req.args)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	writeValue(conn, v)
}

// handleScriptLoad serves SCRIPT LOAD script: its SHA1, when recognised.
func (s *Server) handleScriptLoad(conn redcon.Conn, cmd redcon.Command) {
	if _, err := s.load(cmd.Args[2]); err != nil {
		s.writeError(conn, err)
		return
	}
	conn.WriteBulkString(sha1Hex(cmd.Args[2]))
}

// handleScriptExists serves SCRIPT EXISTS sha...: 1 or 0 for each.
func (s *Server) handleScriptExists(conn redcon.Conn, cmd redcon.Command) {
	conn.WriteArray(len(cmd.Args) - 2)
	for _, sha := range cmd.Args[2:] {
		writeBool(conn, s.scripts.get(strings.ToLower(string(sha))) != nil)
	}
}

// handleScriptFlush serves SCRIPT FLUSH [ASYNC|SYNC]: the cache is emptied.
func (s *Server) handleScriptFlush(conn redcon.Conn, cmd redcon.Command) {
	if len(cmd.Args) > 3 || (len(cmd.Args) == 3 &&
		!strings.EqualFold(string(cmd.Args[2]), "sync") && !strings.EqualFold(string(cmd.Args[2]), "async")) {
		s.writeError(conn, &argError{"ERR SCRIPT FLUSH only support SYNC|ASYNC option"})
		return
	}
	s.scripts.flush()
	conn.WriteString("OK")
}
