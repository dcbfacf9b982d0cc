package proxy

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/lockproxy/lockproxy/proxy/internal/luaform"
	"github.com/tidwall/redcon"
)

// scriptKind is a lock operation that client libraries send as a Lua
// script. Recognising one more kind is one row in scriptKinds
// (scripts_library.go) and one run function.
type scriptKind struct {
	name       string
	keys, args int      // KEYS and ARGV the script reads; fewer is an error
	bodies     []string // the Lua texts of this kind, compared by luaform.Form
	digests    []string // SHA1s of published bodies, recognised without normalising
	// run performs the operation (one Locker call, or one per key) and
	// returns what the script returns on one Redis (see writeValue).
	run func(ctx context.Context, ks *keyspace, keys, args []string) (any, error)
	// fencing: the script's reply carries a fencing token, which only an
	// engine with fencing on mints; it is refused, by refusal, otherwise.
	fencing bool
	refusal string
}

// recognised maps the canonical form of each of scriptKinds' bodies to its
// kind, and known each published SHA1. A body without a form, or a form or
// SHA1 listed under two kinds, is a mistake in the table, caught when the
// package loads.
var recognised, known = func() (map[string]*scriptKind, map[string]*scriptKind) {
	byForm, bySHA := map[string]*scriptKind{}, map[string]*scriptKind{}
	for _, k := range scriptKinds {
		for _, b := range k.bodies {
			form, err := luaform.TemplateForm(b)
			if err != nil {
				panic(fmt.Sprintf("proxy: script kind %s: %v in %q", k.name, err, b))
			}
			if other := byForm[form]; other != nil && other != k {
				panic(fmt.Sprintf("proxy: script kinds %s and %s share the form %q", other.name, k.name, form))
			}
			byForm[form] = k
		}
		for _, d := range k.digests {
			if bySHA[d] != nil {
				panic(fmt.Sprintf("proxy: digest %s listed twice", d))
			}
			bySHA[d] = k
		}
	}
	return byForm, bySHA
}()

// maxRecognisedScript bounds the work spent on one script; lock scripts
// are a few hundred bytes, and a longer one is simply not recognised.
const maxRecognisedScript = 16 << 10

// classify returns the kind of a script by its meaning (its canonical
// form, which is what Lua 5.1 reads in it), or nil when it is not
// recognised: it is not Lua, or means something no kind does.
func classify(body []byte) *scriptKind {
	if len(body) > maxRecognisedScript {
		return nil
	}
	form, err := luaform.Form(body)
	if err != nil {
		return nil
	}
	return recognised[form]
}

// scriptCacheSize bounds each script cache. Only recognised scripts are
// stored, but their whitespace variants are endless.
const scriptCacheSize = 1024

// scriptCache maps SHA1s to kinds. Each user has one for the scripts it
// loaded, as Redis has one per server: what one user loads or flushes is
// not another's business. The server keeps one more, of the scripts it
// refused, so that refusing one again costs a SHA1 and no parsing. It is
// safe for concurrent use.
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

// unrecognisedScript marks a refused SHA1 in the server's refusal cache.
var unrecognisedScript = &scriptKind{name: "unrecognised"}

// load returns the kind of body, stored in the user's cache under its SHA1.
func (s *Server) load(conn redcon.Conn, body []byte) (*scriptKind, error) {
	sha := sha1Hex(body)
	scripts := space(conn).scripts
	if kind := scripts.get(sha); kind != nil {
		return kind, nil
	}
	kind := known[sha] // a published body: no need to read it
	if kind == nil && s.refused.get(sha) == nil {
		if kind = classify(body); kind == nil {
			s.refused.put(sha, unrecognisedScript)
		}
	}
	if kind == nil {
		if obj := redissonRefused[sha]; obj != nil {
			return nil, errorf("ERR lockproxy does not run this script (sha1 %s): %s is not served: %s", sha, obj.name, obj.why)
		}
		return nil, errorf("ERR lockproxy does not run this script (sha1 %s): only recognised lock scripts are served", sha)
	}
	scripts.put(sha, kind)
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
		kind, err = s.load(conn, cmd.Args[1])
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
		if kind = space(conn).scripts.get(strings.ToLower(string(cmd.Args[1]))); kind == nil {
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
	if kind.fencing && !s.fencing {
		s.writeError(conn, errorf("ERR %s", kind.refusal))
		return
	}
	ctx := s.ctx
	v, err := kind.run(ctx, space(conn), req.keys, req.args)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	writeValue(conn, v)
}

// handleScriptLoad serves SCRIPT LOAD script: its SHA1, when recognised.
func (s *Server) handleScriptLoad(conn redcon.Conn, cmd redcon.Command) {
	if _, err := s.load(conn, cmd.Args[2]); err != nil {
		s.writeError(conn, err)
		return
	}
	conn.WriteBulkString(sha1Hex(cmd.Args[2]))
}

// handleScriptExists serves SCRIPT EXISTS sha...: 1 or 0 for each, in the
// user's cache.
func (s *Server) handleScriptExists(conn redcon.Conn, cmd redcon.Command) {
	conn.WriteArray(len(cmd.Args) - 2)
	for _, sha := range cmd.Args[2:] {
		writeBool(conn, space(conn).scripts.get(strings.ToLower(string(sha))) != nil)
	}
}

// handleScriptFlush serves SCRIPT FLUSH [ASYNC|SYNC]: the user's cache is
// emptied.
func (s *Server) handleScriptFlush(conn redcon.Conn, cmd redcon.Command) {
	if len(cmd.Args) > 3 || (len(cmd.Args) == 3 &&
		!strings.EqualFold(string(cmd.Args[2]), "sync") && !strings.EqualFold(string(cmd.Args[2]), "async")) {
		s.writeError(conn, &argError{"ERR SCRIPT FLUSH only support SYNC|ASYNC option"})
		return
	}
	space(conn).scripts.flush()
	conn.WriteString("OK")
}
