package proxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/proxy/internal/luaform"
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
		{"local ttl", "local ttl = ARGV[2]\nif redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ttl) else return 0 end", pexp},
		{"long strings", "if redis.call([[get]], KEYS[1]) == ARGV[1] then return redis.call([==[\ndel]==], KEYS[1]) else return 0 end", del},
		{"escapes", `if redis.call("\103et", KEYS[1]) == ARGV[1] then return redis.call('d\el', KEYS[1]) else return 0 end`, del},
		{"field as index", `if redis["call"]("get", KEYS[1]) == ARGV[1] then return redis['call']("del", KEYS[1]) else return 0 end`, del},
		{"string call", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`, del},
		{"numbers by value", `if redis.call("get", KEYS[1.0]) == ARGV[0x1] then return redis.call("del", KEYS[01]) else return 0.0 end`, del},
		{"semicolon after each statement", "local v = redis.call('get', KEYS[1]);\nif v == ARGV[1] then return redis.call('del', KEYS[1]); end;\nreturn 0;", del},
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
		{"parenthesised operand", `if (redis.call("get",KEYS[1])) == ARGV[1] then return redis.call("del",KEYS[1]) else return (0) end`, del},
		{"parenthesised result cuts the results to one", `if redis.call("get",KEYS[1]) == ARGV[1] then return (redis.call("del",KEYS[1])) else return 0 end`, none},
		{"value case counts", `if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "YES") or redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end`, none},
		{"status case counts", "local values = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do if values[i] ~= ARGV[1] then return false end end redis.call('del', unpack(KEYS)) return redis.status_reply('ok')", none},
		{"merged return0", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return0 end`, none},
		{"quote inside single-quoted string", `if redis.call('get",KEYS[1]) == ARGV[1] then return redis.call("del', KEYS[1]) else return 0 end`, none},
		{"compares with a number", `if redis.call("get",KEYS[1]) == tonumber(ARGV[1]) then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"local number compared", "local token = tonumber(ARGV[1])\nif redis.call('get', KEYS[1]) == token then return redis.call('del', KEYS[1]) else return 0 end", none},
		{"tonumber ttl", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],tonumber(ARGV[2])) else return 0 end`, none},
		{"empty", "", none},

		// The review's findings (issue 10): each was recognised before.
		{"R1 comment ended by a lone CR hides code", "--\r" + `if redis.call("get",KEYS[1]) ~= ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end` +
			"\n" + `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"R1 code shown only to a reader that ends comments at LF", "--[==[\n]]" + `return redis.call("del",KEYS[1])` + "\n]==]" +
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, del},
		{"R2 tonumber with a base", `local v = redis.call("set", tonumber(KEYS[1], ARGV[1]), "x") return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, none},
		{"R2 node-redlock acquire with a base", "for i, key in ipairs(KEYS) do if redis.call(\"exists\", key) == 1 then return 0 end end\n" +
			"for i, key in ipairs(KEYS) do redis.call(\"set\", tonumber(key, ARGV[1]), ARGV[1], \"PX\", ARGV[2]) end return #KEYS", none},
		{"R2 bsm obtain with tonumber(1, offset)", `if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end
			local offset = tonumber(ARGV[2])
			if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], tonumber(1, offset)) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end`, none},
		{"R3 redis-py extend whose newttl is reassigned", `local token = redis.call('get', KEYS[1])
			if not token or token ~= ARGV[1] then return 0 end
			local expiration = redis.call('pttl', KEYS[1])
			if not expiration then expiration = 0 end
			if expiration < 0 then return 0 end
			local newttl = ARGV[2] + expiration
			if ARGV[3] == "0" then newttl = ARGV[2] end
			redis.call('pexpire', KEYS[1], newttl)
			return 1`, none},
		{"R3 local key reassigned", "local key = KEYS[1]\nkey = KEYS[2]\nif redis.call('get', key) == ARGV[1] then return redis.call('del', key) else return 0 end", none},
		{"L1 keys in lower case", `if redis.call("get",keys[1]) == ARGV[1] then return redis.call("del",keys[1]) else return 0 end`, none},
		{"L1 keywords in upper case", `IF redis.call("get",KEYS[1]) == ARGV[1] THEN return redis.call("del",KEYS[1]) else return 0 END`, none},
		{"L1 empty statement", `if redis.call("get",KEYS[1]) == ARGV[1] then ; return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"L1 two semicolons", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end;;`, none},
		{"L1 REDIS.CALL", `if REDIS.CALL("get",KEYS[1]) == ARGV[1] then return REDIS.CALL("del",KEYS[1]) else return 0 end`, none},
		{"call on a new line", "local v = redis.call\n('get', KEYS[1]) if v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", none},
		{"nested long string", `if redis.call([[g[[et]], KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"pcall in place of call", `if redis.pcall("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"local redis", `local redis = {call = function() return 1 end} if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"get read twice after a write", "local v = redis.call('get', KEYS[1])\nredis.call('set', KEYS[1], ARGV[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", none},
		{"local value used later too", "local v = redis.call('get', KEYS[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return v end", none},
		{"shebang", "#!lua\n" + `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, none},
		{"option word as a value", `return redis.call("set", KEYS[1], "NX", "NX", "PX", ARGV[2])`, none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if exp, got := tc.kind, kindName(classify([]byte(tc.script))); exp != got {
				form, err := luaform.Form([]byte(tc.script))
				t.Fatalf("want %s, got %s; form (%v):\n%s", exp, got, err, form)
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

func FuzzForm(f *testing.F) {
	for _, s := range realScripts {
		f.Add(string(readScript(f, s.file)))
	}
	for _, s := range []string{"--[==[", "'\\", "[[", "local x = KEYS[1] local", "tonumber(tonumber(", "\"", "local a = redis.call(\"get\", KEYS[1])"} {
		f.Add(s)
	}
	f.Fuzz(checkForm)
}

// BenchmarkClassifyLong refuses scripts of 1 and 15 KiB made of locals,
// the review's worst case: the old normaliser restarted from the first
// token for each local and took a third of a second for 15 KiB. The two
// figures should differ by about their lengths' ratio (16).
func BenchmarkClassifyLong(b *testing.B) {
	script := func(n int) []byte {
		var s strings.Builder
		for i := range n {
			fmt.Fprintf(&s, "local v%d = redis.call('get', KEYS[1])\nif v%d == ARGV[1] then redis.call('del', KEYS[1]) end\n", i, i)
		}
		return []byte(s.String())
	}
	for _, n := range []int{10, 160} {
		body := script(n)
		b.Run(fmt.Sprintf("%dB", len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				classify(body)
			}
		})
	}
}
