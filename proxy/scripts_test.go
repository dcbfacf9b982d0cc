package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

const (
	releaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	releaseSHA    = "b70c2384248f88e6b75b9f89241a180f856ad852"
	extendScript  = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	extendSHA     = "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf"
	otherScript   = `return redis.call("flushall")`
	otherSHA      = "f4fd637b76a3ef50aff11059894f1f5aa2e31064"
	noScript      = "-NOSCRIPT No matching script. Please use EVAL.\r\n"
)

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

func TestScripts(t *testing.T) {
	ts := startServer(t, Config{})
	load := [][]string{{"SCRIPT", "LOAD", releaseScript}}
	runWireCases(t, ts, []wireCase{
		{name: "eval release", cmd: []string{"EVAL", releaseScript, "1", "k", "v"}, want: ":1\r\n", calls: []string{"release k v"}},
		{name: "eval release not held", cmd: []string{"eval", releaseScript, "1", "k", "v"}, answer: fails(quorum.ErrNotHeld),
			want: ":0\r\n", calls: []string{"release k v"}},
		{name: "eval release no quorum", cmd: []string{"EVAL", releaseScript, "1", "k", "v"},
			answer: fails(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3}),
			want:   "-NOQUORUM 1 of 3 backends answered, 2 needed\r\n", calls: []string{"release k v"}},
		{name: "eval extend", cmd: []string{"EVAL", extendScript, "1", "k", "v", "5000"}, want: ":1\r\n", calls: []string{"extend k v 5s"}},
		{name: "eval extend not held", cmd: []string{"EVAL", extendScript, "1", "k", "v", "5000"}, answer: fails(quorum.ErrNotHeld),
			want: ":0\r\n", calls: []string{"extend k v 5s"}},
		{name: "eval extend above max", cmd: []string{"EVAL", extendScript, "1", "k", "v", "120000"},
			answer: fails(&quorum.TTLError{TTL: 2 * time.Minute, Max: time.Minute}),
			want:   "-ERR invalid expire time: 120000 ms exceeds max_ttl 60000 ms\r\n", calls: []string{"extend k v 2m0s"}},
		{name: "eval extend bad ttl", cmd: []string{"EVAL", extendScript, "1", "k", "v", "soon"},
			want: "-ERR value is not an integer or out of range\r\n"},
		{name: "eval unrecognised", cmd: []string{"EVAL", otherScript, "0"},
			want: "-ERR lockproxy does not run this script (sha1 " + otherSHA + "): only recognised lock scripts are served\r\n"},
		{name: "numkeys not integer", cmd: []string{"EVAL", releaseScript, "one", "k", "v"}, want: "-ERR value is not an integer or out of range\r\n"},
		{name: "numkeys negative", cmd: []string{"EVAL", releaseScript, "-1", "k", "v"}, want: "-ERR Number of keys can't be negative\r\n"},
		{name: "numkeys too many", cmd: []string{"EVAL", releaseScript, "3", "k", "v"}, want: "-ERR Number of keys can't be greater than number of args\r\n"},
		{name: "numkeys checked before the script", cmd: []string{"EVAL", otherScript, "x"}, want: "-ERR value is not an integer or out of range\r\n"},
		{name: "missing token", cmd: []string{"EVAL", releaseScript, "1", "k"},
			want: "-ERR lockproxy runs this script as compare-and-delete, which needs 1 keys and 1 arguments (got 1 and 0)\r\n"},
		{name: "token passed as key", cmd: []string{"EVAL", releaseScript, "2", "k", "v"},
			want: "-ERR lockproxy runs this script as compare-and-delete, which needs 1 keys and 1 arguments (got 2 and 0)\r\n"},

		{name: "evalsha unknown", cmd: []string{"EVALSHA", "0123456789012345678901234567890123456789", "1", "k", "v"}, want: noScript},
		{name: "evalsha not a sha", cmd: []string{"EVALSHA", "abc", "0"}, want: noScript},
		{name: "evalsha numkeys first", cmd: []string{"EVALSHA", "abc", "-2"}, want: "-ERR Number of keys can't be negative\r\n"},
		{name: "script load", cmd: load[0], want: bulk(releaseSHA)},
		{name: "script load unrecognised", cmd: []string{"SCRIPT", "LOAD", otherScript},
			want: "-ERR lockproxy does not run this script (sha1 " + otherSHA + "): only recognised lock scripts are served\r\n"},
		{name: "evalsha after load", setup: load, cmd: []string{"EVALSHA", releaseSHA, "1", "k", "v"}, want: ":1\r\n", calls: []string{"release k v"}},
		{name: "evalsha upper case", setup: load, cmd: []string{"evalsha", "B70C2384248F88E6B75B9F89241A180F856AD852", "1", "k", "v"},
			want: ":1\r\n", calls: []string{"release k v"}},
		{name: "script exists", setup: load, cmd: []string{"SCRIPT", "EXISTS", releaseSHA, otherSHA}, want: "*2\r\n:1\r\n:0\r\n"},
		{name: "script flush", setup: load, cmd: []string{"SCRIPT", "FLUSH"}, want: "+OK\r\n"},
		{name: "script flush async", cmd: []string{"script", "flush", "async"}, want: "+OK\r\n"},
		{name: "script flush bad option", cmd: []string{"SCRIPT", "FLUSH", "NOW"}, want: "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n"},
	})
}

// TestScriptCacheLifecycle follows the transports libraries use: EVALSHA
// first (NOSCRIPT), EVAL or SCRIPT LOAD, EVALSHA from any connection, and
// NOSCRIPT again after SCRIPT FLUSH.
func TestScriptCacheLifecycle(t *testing.T) {
	ts := startServer(t, Config{})
	a, b := connect(t, ts.addr), connect(t, ts.addr)
	steps := []struct {
		w    *wire
		cmd  []string
		want string
	}{
		{a, []string{"EVALSHA", extendSHA, "1", "k", "v", "100"}, noScript},
		{a, []string{"EVAL", extendScript, "1", "k", "v", "100"}, ":1\r\n"},
		{b, []string{"EVALSHA", extendSHA, "1", "k", "v", "100"}, ":1\r\n"},
		{b, []string{"SCRIPT", "EXISTS", extendSHA}, "*1\r\n:1\r\n"},
		{a, []string{"SCRIPT", "FLUSH", "SYNC"}, "+OK\r\n"},
		{b, []string{"EVALSHA", extendSHA, "1", "k", "v", "100"}, noScript},
		{b, []string{"SCRIPT", "EXISTS", extendSHA}, "*1\r\n:0\r\n"},
		{b, []string{"SCRIPT", "LOAD", extendScript}, bulk(extendSHA)},
		{a, []string{"EVALSHA", extendSHA, "1", "k", "v", "100"}, ":1\r\n"},
	}
	for i, s := range steps {
		if exp, got := s.want, s.w.do(s.cmd...); exp != got {
			t.Fatalf("step %d %q: want %q, got %q", i, s.cmd[:2], exp, got)
		}
	}
}

func TestScriptLoadRealScripts(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		t.Run(s.file, func(t *testing.T) {
			if exp, got := bulk(s.sha), w.do("SCRIPT", "LOAD", string(readScript(t, s.file))); exp != got {
				t.Fatalf("want %q, got %q", exp, got)
			}
		})
	}
}

func TestScriptCacheBounded(t *testing.T) {
	c := newScriptCache(2)
	kind := scriptKinds[0]
	for _, sha := range []string{"a", "b", "c", "c"} {
		c.put(sha, kind)
	}
	if exp, got := 2, len(c.bySHA); exp != got {
		t.Fatalf("size: want %d, got %d", exp, got)
	}
	if c.get("c") == nil {
		t.Fatal("the newest entry was dropped")
	}
}

// TestScriptCachePerUser checks that what one user loads, flushes or asks
// about is its own: SCRIPT FLUSH by one tenant must not empty another's
// cache, nor SCRIPT EXISTS tell what another loaded.
func TestScriptCachePerUser(t *testing.T) {
	ts := startServer(t, Config{Users: []User{
		{Name: "a", PasswordSHA256: sha256Hex("pa"), KeyPrefix: "a:"},
		{Name: "b", PasswordSHA256: sha256Hex("pb"), KeyPrefix: "b:"},
	}})
	a, b := connect(t, ts.addr), connect(t, ts.addr)
	a.do("AUTH", "a", "pa")
	b.do("AUTH", "b", "pb")
	steps := []struct {
		w    *wire
		cmd  []string
		want string
	}{
		{a, []string{"SCRIPT", "LOAD", releaseScript}, bulk(releaseSHA)},
		{b, []string{"SCRIPT", "EXISTS", releaseSHA}, "*1\r\n:0\r\n"},
		{b, []string{"EVALSHA", releaseSHA, "1", "k", "v"}, noScript},
		{b, []string{"SCRIPT", "LOAD", extendScript}, bulk(extendSHA)},
		{b, []string{"SCRIPT", "FLUSH"}, "+OK\r\n"},
		{a, []string{"SCRIPT", "EXISTS", releaseSHA, extendSHA}, "*2\r\n:1\r\n:0\r\n"},
		{a, []string{"EVALSHA", releaseSHA, "1", "k", "v"}, ":1\r\n"},
		{b, []string{"SCRIPT", "EXISTS", extendSHA}, "*1\r\n:0\r\n"},
	}
	for i, s := range steps {
		if exp, got := s.want, s.w.do(s.cmd...); exp != got {
			t.Fatalf("step %d %q: want %q, got %q", i, s.cmd[:2], exp, got)
		}
	}
}

// TestRefusalsAreCached checks that a script refused once is refused again
// by its SHA1, without being read again: a client sending a long script
// that is not a lock script costs one parse, not one per EVAL.
func TestRefusalsAreCached(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	long := otherScript + strings.Repeat("\n-- padding", 1000)
	sha := sha1Hex([]byte(long))
	want := "-ERR lockproxy does not run this script (sha1 " + sha + "): only recognised lock scripts are served\r\n"
	if got := w.do("EVAL", long, "0"); got != want {
		t.Fatalf("first EVAL: want %q, got %q", want, got)
	}
	if ts.refused.get(sha) == nil {
		t.Fatal("the refusal was not cached")
	}
	// The cache is read before the script: a recognised script whose SHA1
	// is marked refused is refused.
	variant := releaseScript + " "
	ts.refused.put(sha1Hex([]byte(variant)), unrecognisedScript)
	if got := w.do("EVAL", variant, "1", "k", "v"); !strings.HasPrefix(got, "-ERR lockproxy does not run this script") {
		t.Fatalf("a script marked refused: got %q", got)
	}
}
