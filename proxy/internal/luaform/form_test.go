package luaform

import (
	"strings"
	"testing"
)

const release = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

func form(t *testing.T, src string) string {
	t.Helper()
	f, err := Form([]byte(src))
	if err != nil {
		t.Fatalf("Form(%q): %v", src, err)
	}
	return f
}

// TestSameForm lists texts that Lua 5.1 reads as the same program.
func TestSameForm(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"layout", release, "if redis.call('get',KEYS[1])==ARGV[1]then return redis.call('del',KEYS[1])else return 0 end"},
		{"CRLF and tabs", release, strings.ReplaceAll(strings.ReplaceAll(release, " then ", "\tthen\r\n"), " else ", "\r\nelse\n\r")},
		{"short comment to LF", release, "-- release\n" + release},
		{"short comment to CR", release, "-- release\r" + release},
		{"long comments", release, "--[[ a\n]]" + release + "--[==[ ]] ]=] ]==]"},
		{"comment opener that is not long", release, "--[=x\n" + release},
		{"escapes", release, strings.Replace(release, `"get"`, `"\103\101t"`, 1)},
		{"escaped newline in a string", `return "a\nb"`, "return \"a\\\nb\""},
		{"escaped CRLF is one newline", `return "a\nb"`, "return \"a\\\r\nb\""},
		{"unknown escape is the byte", `return "q"`, `return "\q"`},
		{"long string skips its first newline", `return "x"`, "return [[\nx]]"},
		{"long string line ends are LF", `return "a\nb"`, "return [==[a\r\nb]==]"},
		{"long string holds brackets of other levels", `return "a]]b[=[c"`, "return [==[a]]b[=[c]==]"},
		{"numbers by value", `return KEYS[1]`, `return KEYS[1.0]`},
		{"hex numbers", `return 16`, `return 0x10`},
		{"exponents", `return 100`, `return 1e2`},
		{"leading zeros", `return 7`, `return 007`},
		{"field sugar", `return redis.call("get", KEYS[1])`, `return redis["call"]("get", KEYS[1])`},
		{"string argument sugar", `return tostring("x")`, `return tostring"x"`},
		{"table argument sugar", `return unpack({1})`, `return unpack{1}`},
		{"table separators", `return {1, 2}`, `return {1; 2;}`},
		{"condition parentheses", release, `if ((redis.call("get", KEYS[1]) == ARGV[1])) then return redis.call("del", KEYS[1]) else return 0 end`},
		{"parenthesised operand", release, `if (redis.call("get", KEYS[1])) == (ARGV[1]) then return redis.call("del", KEYS[1]) else return (0) end`},
		{"semicolons after statements", release + ";", strings.Replace(release, `redis.call("del", KEYS[1])`, `redis.call("del", KEYS[1]);`, 1) + ";"},
		{"command case", release, strings.Replace(release, `"get"`, `"GeT"`, 1)},
		{"option case", `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, `return redis.call("SET", KEYS[1], ARGV[1], "nx", "Px", ARGV[2])`},
		{"local names", "local a = redis.call('get', KEYS[1]) if a == ARGV[1] or a == false then return 1 end",
			"local token = redis.call('get', KEYS[1]) if token == ARGV[1] or token == false then return 1 end"},
		{"argument locals", release, `local key = KEYS[1] local tok = ARGV[1] if redis.call("get", key) == tok then return redis.call("del", key) else return 0 end`},
		{"unused argument local", release, "local unused = ARGV[2] " + release},
		{"value read once first thing", release, `local v = redis.call("get", KEYS[1]) if v == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`},
		{"value read once through an argument local", release, `local v = redis.call("get", KEYS[1]) local t = ARGV[1] if v == t then return redis.call("del", KEYS[1]) else return 0 end`},
		{"inner scopes", "do local x = KEYS[1] end return x", "do local y = KEYS[1] end return x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a, b := form(t, tc.a), form(t, tc.b); a != b {
				t.Fatalf("forms differ:\n%s\n%s", a, b)
			}
		})
	}
}

// TestOtherForm lists texts that differ from the first by what they do.
func TestOtherForm(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"comparison", release, strings.Replace(release, "==", "~=", 1)},
		{"names are case-sensitive", release, strings.ReplaceAll(release, "KEYS", "keys")},
		{"other strings keep their case", `return redis.status_reply("OK")`, `return redis.status_reply("ok")`},
		{"option word where it is a value", `return redis.call("set", KEYS[1], "nx")`, `return redis.call("set", KEYS[1], "NX")`},
		{"option word of another command", `return redis.call("hset", KEYS[1], ARGV[1], "nx")`, `return redis.call("hset", KEYS[1], ARGV[1], "NX")`},
		{"comment ended by CR reveals code", release, "--\r" + strings.Replace(release, "==", "~=", 1) + "\n" + release},
		{"call or pcall", release, strings.Replace(release, "redis.call", "redis.pcall", 1)},
		{"tonumber with a base", `return tonumber(ARGV[1])`, `return tonumber(ARGV[1], ARGV[2])`},
		{"tonumber is not its argument", `return redis.call("pexpire", KEYS[1], ARGV[2])`, `return redis.call("pexpire", KEYS[1], tonumber(ARGV[2]))`},
		{"reassigned local", "local t = ARGV[1] return redis.call('get', t)", "local t = ARGV[1] t = ARGV[2] return redis.call('get', t)"},
		{"local read after a write", `local v = redis.call("get", KEYS[1]) if v == ARGV[1] then return 1 end return 0`,
			`local v = redis.call("get", KEYS[1]) redis.call("del", KEYS[1]) if v == ARGV[1] then return 1 end return 0`},
		{"local read twice", release, `local v = redis.call("get", KEYS[1]) if v == ARGV[1] then return redis.call("del", KEYS[1]) else return v end`},
		{"local read second", release, `local v = redis.call("get", KEYS[1]) if ARGV[1] == v then return redis.call("del", KEYS[1]) else return 0 end`},
		{"local not plain", release, `local k = KEYS[1] .. "" if redis.call("get", k) == ARGV[1] then return redis.call("del", k) else return 0 end`},
		{"shadowed global", release, "local KEYS = ARGV " + release},
		{"truncating parentheses", `return redis.call("get", KEYS[1])`, `return (redis.call("get", KEYS[1]))`},
		{"concatenation", `return "ab"`, `return "a" .. "b"`},
		{"priorities", `return 1 + 2 * 3`, `return (1 + 2) * 3`},
		{"power is right associative", `return 2 ^ 3 ^ 2`, `return (2 ^ 3) ^ 2`},
		{"unary minus binds less than power", `return -2 ^ 2`, `return (-2) ^ 2`},
		{"else branch", `if ARGV[1] then return 1 else return 0 end`, `if ARGV[1] then return 1 end return 0`},
		{"elseif is not a nested if", `if ARGV[1] then return 1 elseif ARGV[2] then return 2 end`, `if ARGV[1] then return 1 else if ARGV[2] then return 2 end end`},
		{"repeat sees its body", "local x = 1 repeat local x = 2 until x == 2 return x", "local x = 1 repeat local y = 2 until x == 2 return x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a, b := form(t, tc.a), form(t, tc.b); a == b {
				t.Fatalf("same form:\n%s", a)
			}
		})
	}
}

// TestNoForm lists texts that Lua 5.1 refuses (or that this package does
// not take), each for the reason named.
func TestNoForm(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"keywords are lower case", "IF x THEN return 1 END"},
		{"empty statement", "if ARGV[1] then ; return 1 end"},
		{"two semicolons", "return 1;;"},
		{"semicolon first", "; return 1"},
		{"statement after return", "return 1 return 2"},
		{"break outside a loop", "break"},
		{"break in a function in a loop", "for i = 1, 2 do local f = function() break end end"},
		{"call on a new line", "local v = redis.call\n('get', KEYS[1])"},
		{"call on a new line after a comment", "local v = redis.call --[[\n]] ('get', KEYS[1])"},
		{"assignment to a call", "f() = 1"},
		{"assignment to parentheses", "(x) = 1"},
		{"expression statement", "x"},
		{"nested level-0 long string", "return [[a[[b]]"},
		{"nested level-0 long comment", "--[[a[[b]]\nreturn 1"},
		{"invalid long string delimiter", "return [=x]"},
		{"unfinished string", "return 'abc"},
		{"newline in a string", "return 'a\nb'"},
		{"unfinished long string", "return [[abc"},
		{"escape too large", `return "\256"`},
		{"malformed number", "return 3..2"},
		{"number followed by letters", "return 1then"},
		{"lone tilde", "return 1 ~ 2"},
		{"Lua 5.3 operators", "return 1 // 2"},
		{"goto labels", "::top:: return 1"},
		{"shebang", "#!lua\nreturn 1"},
		{"byte above 127", "return \xc3\xa9"},
		{"NUL byte", "return 1\x00"},
		{"varargs", "return ..."},
		{"vararg function", "local f = function(...) end"},
		{"unclosed block", "if x then return 1"},
		{"deep nesting", "return " + strings.Repeat("(", maxDepth+1) + "1" + strings.Repeat(")", maxDepth+1)},
		{"many locals", strings.Repeat("local x = 1 ", maxLocals+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f, err := Form([]byte(tc.src)); err == nil {
				t.Fatalf("Form(%q) = %s, want an error", tc.src, f)
			}
		})
	}
}

func TestTemplateOptionWords(t *testing.T) {
	for _, ok := range []string{
		`return redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2])`,
		`return redis.call("get", KEYS[1])`,
		`return redis.call("pexpire", KEYS[1], ARGV[1], "xx")`,
	} {
		if _, err := TemplateForm(ok); err != nil {
			t.Errorf("TemplateForm(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{
		`return redis.call("set", KEYS[1], "nx")`,
		`if ARGV[1] == "px" then return 1 end`,
		`return redis.call("hset", KEYS[1], ARGV[1], "nx")`,
	} {
		if _, err := TemplateForm(bad); err == nil {
			t.Errorf("TemplateForm(%q) took an option word that Redis would not read as one", bad)
		}
	}
}

// TestFormIsLinear checks that a long script costs time in proportion to
// its length: the review's 15 KB script took a third of a second.
func TestFormIsLinear(t *testing.T) {
	unit := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end\n"
	long := strings.Repeat(unit, (16<<10)/len(unit))
	ops := testing.AllocsPerRun(3, func() { Form([]byte(long)) })
	short := testing.AllocsPerRun(3, func() { Form([]byte(strings.Repeat(unit, 10))) })
	// Allocations stand for work here (a timed assertion would flake):
	// 16 KiB is about 180 times the short script, so linear work is about
	// 180 times its allocations, and quadratic work far more.
	if ratio := ops / short; ratio > 400 {
		t.Fatalf("a script 180 times longer allocates %.0f times as much", ratio)
	}
}

func FuzzForm(f *testing.F) {
	f.Add(release)
	f.Add("--[==[\n]]x]==]return 1")
	f.Add("return [[\r\nx]]")
	f.Fuzz(func(t *testing.T, src string) {
		a, err := Form([]byte(src))
		b, err2 := Form([]byte(" \n" + src))
		if (err == nil) != (err2 == nil) || a != b {
			t.Fatalf("a leading space and newline changed the form of %q: %q (%v), %q (%v)", src, a, err, b, err2)
		}
	})
}

func BenchmarkForm16KiB(b *testing.B) {
	unit := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end\n"
	long := []byte(strings.Repeat(unit, (16<<10)/len(unit)))
	b.SetBytes(int64(len(long)))
	for b.Loop() {
		Form(long)
	}
}

func BenchmarkFormRelease(b *testing.B) {
	for b.Loop() {
		Form([]byte(release))
	}
}
