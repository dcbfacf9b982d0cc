package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
		{"parenthesised condition", `if (redis.call("get",KEYS[1]) == ARGV[1]) then return redis.call("del",KEYS[1]) else return 0 end`, del},
		{"doubly parenthesised condition", `if ((redis.call("get",KEYS[1]) == ARGV[1])) then return redis.call("del",KEYS[1]) else return 0 end`, del},
		{"upper-case options", `return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, "acquire"},
		{"lower-case options", `return redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2])`, "acquire"},

		{"not equal deletes", `if redis.call("get",KEYS[1]) ~= ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"unconditional delete", `return redis.call("del",KEYS[1])`, none},
		{"other key", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[2]) else return 0 end`, none},
		{"compares argv 2", `if redis.call("get",KEYS[1]) == ARGV[2] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"expire in seconds", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("expire",KEYS[1],ARGV[2]) else return 0 end`, none},
		{"returns 1 when not held", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 1 end`, none},
		{"get moved past a write", "local v = redis.call('get', KEYS[1])\nredis.call('set', KEYS[1], ARGV[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", none},
		{"local reassigned", "local key = KEYS[1]\nkey = KEYS[2]\nif redis.call('get', key) == ARGV[1] then return redis.call('del', key) else return 0 end", none},
		{"local not plain", "local key = KEYS[1] .. ':x'\nif redis.call('get', key) == ARGV[1] then return redis.call('del', key) else return 0 end", none},
		{"parenthesised operand only", `if (redis.call("get",KEYS[1])) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"value case counts", `if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "YES") or redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end`, none},
		{"status case counts", "local values = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do if values[i] ~= ARGV[1] then return false end end redis.call('del', unpack(KEYS)) return redis.status_reply('ok')", none},
		{"merged return0", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return0 end`, none},
		{"quote inside single-quoted string", `if redis.call('get",KEYS[1]) == ARGV[1] then return redis.call("del', KEYS[1]) else return 0 end`, none},
		{"compares with a number", `if redis.call("get",KEYS[1]) == tonumber(ARGV[1]) then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"local number compared", "local token = tonumber(ARGV[1])\nif redis.call('get', KEYS[1]) == token then return redis.call('del', KEYS[1]) else return 0 end", none},
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
