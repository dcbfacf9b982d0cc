package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bodies in testdata/scripts are byte-exact recreations of published
// scripts: each file's SHA1 equals the one research/scripts-index.tsv
// records for it (checked here, so a stray edit shows).
var realScripts = []struct {
	file, sha, kind string
}{
	{"redis-io-canonical-release.lua", "194f3902b2dd08557818d09fc2e7682d91480e53", "compare-and-delete"},
	{"redis-io-canonical-release-noeol.lua", "647c65a442733a1aa440f99908d249d13b4d6c4a", "compare-and-delete"},
	{"redis-io-canonical-release-oneline.lua", "b70c2384248f88e6b75b9f89241a180f856ad852", "compare-and-delete"},
	{"bsm-redislock-0.9.4-release.lua", "cf0e94b2e9ffc7e04395cf88f7583fc309985910", "compare-and-delete"},
	{"bsm-redislock-0.9.4-refresh.lua", "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf", "compare-and-pexpire"},
	{"redis-semaphore-5.8.0-mutex-release.lua", "7157921a7cc7cfba979acf6d63f073151df17d12", "compare-and-delete"},
	{"redis-py-4.3.4-release.lua", "c3f8721cbb97f72bc19e972846bd7aaf91901658", "compare-and-delete"},
	{"redis-py-4.3.4-reacquire.lua", "1cac51482acf5858da00f6d685d68f886cd6b6b2", "compare-and-pexpire"},
	{"redsync-4.18.1-extend.lua", "d75bb8b5bd13532ddedd17762e772346e39b321e", "compare-and-pexpire"},
}

func readScript(t testing.TB, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "scripts", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func kindName(k *scriptKind) string {
	if k == nil {
		return "<unrecognised>"
	}
	return k.name
}

func TestClassifyRealScripts(t *testing.T) {
	for _, tc := range realScripts {
		t.Run(tc.file, func(t *testing.T) {
			body := readScript(t, tc.file)
			if exp, got := tc.sha, sha1Hex(body); exp != got {
				t.Fatalf("sha1: want %s, got %s (the file is not the published body)", exp, got)
			}
			if exp, got := tc.kind, kindName(classify(body)); exp != got {
				t.Fatalf("kind: want %s, got %s; normal form:\n%s", exp, got, normalise(string(body)))
			}
		})
	}
}

func TestClassifyVariants(t *testing.T) {
	const del, pexp, none = "compare-and-delete", "compare-and-pexpire", "<unrecognised>"
	for _, tc := range []struct{ name, script, kind string }{
		{"single quotes", `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`, del},
		{"upper-case commands", `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`, del},
		{"no whitespace", `if redis.call("get",KEYS[1])==ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, del},
		{"tabs crlf and semicolons", "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\r\n\treturn redis.call(\"del\",KEYS[1]);\r\nelse\r\n\treturn 0;\r\nend;\r\n", del},
		{"comments", "-- release the lock\nif redis.call('get', KEYS[1]) == ARGV[1] then --[[ ours ]] return redis.call('del', KEYS[1]) else return 0 end", del},
		{"unlink", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("unlink",KEYS[1]) else return 0 end`, del},
		{"swapped comparison", `if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("del",KEYS[1]) else return 0 end`, del},
		{"locals", "local key = KEYS[1]\nlocal token = ARGV[1]\nif redis.call('get', key) == token then return redis.call('del', key) end\nreturn 0", del},
		{"local value", "local v = redis.call('get', KEYS[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", del},
		{"del then return 1", `if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("DEL", KEYS[1]) return 1 else return 0 end`, del},
		{"tonumber ttl", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],tonumber(ARGV[2])) else return 0 end`, pexp},
		{"local ttl", "local ttl = tonumber(ARGV[2])\nif redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ttl) else return 0 end", pexp},

		{"not equal deletes", `if redis.call("get",KEYS[1]) ~= ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"unconditional delete", `return redis.call("del",KEYS[1])`, none},
		{"other key", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[2]) else return 0 end`, none},
		{"compares argv 2", `if redis.call("get",KEYS[1]) == ARGV[2] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"expire in seconds", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("expire",KEYS[1],ARGV[2]) else return 0 end`, none},
		{"returns 1 when not held", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 1 end`, none},
		{"get moved past a write", "local v = redis.call('get', KEYS[1])\nredis.call('set', KEYS[1], ARGV[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", none},
		{"local reassigned", "local key = KEYS[1]\nkey = KEYS[2]\nif redis.call('get', key) == ARGV[1] then return redis.call('del', key) else return 0 end", none},
		{"local not plain", "local key = KEYS[1] .. ':x'\nif redis.call('get', key) == ARGV[1] then return redis.call('del', key) else return 0 end", none},
		{"merged return0", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return0 end`, none},
		{"quote inside single-quoted string", `if redis.call('get",KEYS[1]) == ARGV[1] then return redis.call("del', KEYS[1]) else return 0 end`, none},
		{"empty", "", none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if exp, got := tc.kind, kindName(classify([]byte(tc.script))); exp != got {
				t.Fatalf("want %s, got %s; normal form:\n%s", exp, got, normalise(tc.script))
			}
		})
	}
}

func TestClassifyBoundsLength(t *testing.T) {
	body := readScript(t, "redis-io-canonical-release.lua")
	long := append(body, strings.Repeat(" ", maxRecognisedScript)...)
	if k := classify(long); k != nil {
		t.Fatalf("a script over %d bytes was recognised as %s", maxRecognisedScript, k.name)
	}
}

func FuzzNormalise(f *testing.F) {
	for _, s := range realScripts {
		f.Add(string(readScript(f, s.file)))
	}
	for _, s := range []string{"--[==[", "'\\", "[[", "local x = KEYS[1] local", "tonumber(tonumber(", "\"", "local a = redis.call(\"get\", KEYS[1])"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		n := normalise(src)
		if kind := classify([]byte(src)); kind != nil && recognised[n] != kind {
			t.Fatalf("classify disagrees with the normal form %q", n)
		}
	})
}
