package proxy

import (
	"math"
	"strconv"
	"testing"
	"time"
)

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"7", 7, true},
		{"-7", -7, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"-0", 0, false},
		{"007", 0, false},
		{"+7", 0, false},
		{" 7", 0, false},
		{"7 ", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, ok := parseInt([]byte(tc.in))
			if ok != tc.ok || got != tc.want {
				t.Fatalf("want %d %v, got %d %v", tc.want, tc.ok, got, ok)
			}
		})
	}
}

func TestParseTTL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		seconds bool
		want    time.Duration
		err     string
	}{
		{"ms", "1500", false, 1500 * time.Millisecond, ""},
		{"s", "8", true, 8 * time.Second, ""},
		{"not integer", "1.5", false, 0, "ERR value is not an integer or out of range"},
		{"zero", "0", false, 0, "ERR invalid expire time in 'set' command"},
		{"negative", "-5", true, 0, "ERR invalid expire time in 'set' command"},
		{"seconds overflow ms", "9223372036854776", true, 0, "ERR invalid expire time in 'set' command"},
		{"ms beyond a Duration", "9223372036854775807", false, 0, "ttl 9223372036854775807 ms is too long"},
		{"s beyond a Duration", "9223372036855", true, 0, "ttl 9223372036855 s is too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTTL([]byte(tc.in), tc.seconds, "set")
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("want error %q, got %v (%s)", tc.err, err, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("want %s, got %s %v", tc.want, got, err)
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	ts := startServer(t, Config{})
	runWireCases(t, ts, []wireCase{
		{name: "unknown command", cmd: []string{"SWAPDB", "0"},
			want: "-ERR unknown command 'SWAPDB', with args beginning with: '0' \r\n"},
		{name: "unknown command without args", cmd: []string{"foo"},
			want: "-ERR unknown command 'foo', with args beginning with: \r\n"},
		{name: "newline in unknown command stays one line", cmd: []string{"a\r\nb"},
			want: "-ERR unknown command 'a  b', with args beginning with: \r\n"},
		{name: "command case", cmd: []string{"pInG"}, want: "+PONG\r\n"},
		{name: "set arity", cmd: []string{"SET", "k"}, want: "-ERR wrong number of arguments for 'set' command\r\n"},
		{name: "get arity", cmd: []string{"GET", "a", "b"}, want: "-ERR wrong number of arguments for 'get' command\r\n"},
		{name: "setnx arity", cmd: []string{"setnx", "k"}, want: "-ERR wrong number of arguments for 'setnx' command\r\n"},
		{name: "del arity", cmd: []string{"DEL"}, want: "-ERR wrong number of arguments for 'del' command\r\n"},
		{name: "eval arity", cmd: []string{"EVAL", "return 1"}, want: "-ERR wrong number of arguments for 'eval' command\r\n"},
		{name: "time arity", cmd: []string{"TIME", "x"}, want: "-ERR wrong number of arguments for 'time' command\r\n"},
		{name: "reset arity", cmd: []string{"RESET", "x"}, want: "-ERR wrong number of arguments for 'reset' command\r\n"},
		{name: "container arity", cmd: []string{"CLIENT"}, want: "-ERR wrong number of arguments for 'client' command\r\n"},
		{name: "subcommand arity", cmd: []string{"CLIENT", "SETNAME"}, want: "-ERR wrong number of arguments for 'client|setname' command\r\n"},
		{name: "script subcommand arity", cmd: []string{"SCRIPT", "EXISTS"}, want: "-ERR wrong number of arguments for 'script|exists' command\r\n"},
		{name: "unknown subcommand", cmd: []string{"client", "kill", "x"}, want: "-ERR unknown subcommand 'kill'. Try CLIENT HELP.\r\n"},
		{name: "unknown config subcommand", cmd: []string{"CONFIG", "SET", "a", "b"}, want: "-ERR unknown subcommand 'SET'. Try CONFIG HELP.\r\n"},
	})
}
