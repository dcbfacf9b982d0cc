package proxy

import (
	"math"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestParseBlockTimeout checks BLPOP's timeout against what redis-server
// 7.0.15 answered to each (test/blpop_test.go compares the errors' bytes).
func TestParseBlockTimeout(t *testing.T) {
	forever := time.Duration(0)
	for _, tc := range []struct {
		arg  string
		want time.Duration
		err  error
	}{
		{"0", forever, nil},
		{"1", time.Second, nil},
		{"1.5", 1500 * time.Millisecond, nil},
		{"0.0001", time.Millisecond, nil}, // rounded up: Redis returns after 1 ms
		{"0.0005", time.Millisecond, nil},
		{"-0.0001", forever, nil}, // rounded up to -0: Redis blocks without end
		{"-0", forever, nil},
		{"+1", time.Second, nil},
		{".5", 500 * time.Millisecond, nil},
		{"5.", 5 * time.Second, nil},
		{"1e-3", time.Millisecond, nil},
		{"0x10", 16 * time.Second, nil},
		{"0x1p-2", 250 * time.Millisecond, nil},
		{"1e15", time.Duration(math.MaxInt64/time.Millisecond) * time.Millisecond, nil},
		{"abc", 0, errTimeoutNotFloat},
		{"nan", 0, errTimeoutNotFloat},
		{"-nan", 0, errTimeoutNotFloat},
		{" 1", 0, errTimeoutNotFloat},
		{"1 ", 0, errTimeoutNotFloat},
		{"", 0, errTimeoutNotFloat},
		{"1_0", 0, errTimeoutNotFloat},
		{"0x", 0, errTimeoutNotFloat},
		{"1e", 0, errTimeoutNotFloat},
		{"1.2.3", 0, errTimeoutNotFloat},
		{"-1", 0, errTimeoutNegative},
		{"inf", 0, errTimeoutNegative}, // C's long long of inf·1000 is LLONG_MIN
		{"-inf", 0, errTimeoutNegative},
		{"infinity", 0, errTimeoutNegative},
		{"1e16", 0, errTimeoutNegative},
		{"1e400", 0, errTimeoutNegative},
		{"9223372036854775807", 0, errTimeoutNegative},
	} {
		got, err := parseBlockTimeout([]byte(tc.arg))
		if exp := tc.err; exp != err {
			t.Errorf("%q: want error %v, got %v", tc.arg, exp, err)
		}
		if exp := tc.want; err == nil && exp != got {
			t.Errorf("%q: want %v, got %v", tc.arg, exp, got)
		}
	}
}

// TestBLPop checks BLPOP's replies and the one wait it asks the Locker for.
func TestBLPop(t *testing.T) {
	ts := startServer(t, Config{})
	const element = "*2\r\n$13\r\nlock-signal:n\r\n$1\r\n1\r\n"
	timedOut := fails(quorum.ErrTimeout)
	oneKey := "-ERR lockproxy serves BLPOP of one key, python-redis-lock's lock-signal:<name>, as a wait for the release of lock:<name> (got 2 keys)\r\n"
	notSignal := "-ERR lockproxy serves BLPOP only of python-redis-lock's lock-signal:<name>, as a wait for the release of lock:<name>; it keeps no lists\r\n"
	runWireCases(t, ts, []wireCase{
		{name: "released", cmd: []string{"BLPOP", "lock-signal:n", "0"}, want: element, calls: []string{"awaitrelease lock:n"}},
		{name: "released within the timeout", cmd: []string{"blpop", "lock-signal:n", "2.5"}, want: element, calls: []string{"awaitrelease lock:n 2.5s"}},
		{name: "timeout RESP2", cmd: []string{"BLPOP", "lock-signal:n", "1"}, answer: timedOut, want: "*-1\r\n", calls: []string{"awaitrelease lock:n 1s"}},
		{name: "timeout RESP3", setup: [][]string{{"HELLO", "3"}}, cmd: []string{"BLPOP", "lock-signal:n", "1"}, answer: timedOut, want: "_\r\n", calls: []string{"awaitrelease lock:n 1s"}},
		{name: "element RESP3", setup: [][]string{{"HELLO", "3"}}, cmd: []string{"BLPOP", "lock-signal:n", "1"}, want: element, calls: []string{"awaitrelease lock:n 1s"}},
		{name: "empty name", cmd: []string{"BLPOP", "lock-signal:", "1"}, want: "*2\r\n$12\r\nlock-signal:\r\n$1\r\n1\r\n", calls: []string{"awaitrelease lock: 1s"}},
		{name: "no quorum", cmd: []string{"BLPOP", "lock-signal:n", "1"}, answer: noQuorum, want: noQuorumReply, calls: []string{"awaitrelease lock:n 1s"}},
		{name: "negative timeout", cmd: []string{"BLPOP", "lock-signal:n", "-1"}, want: "-ERR timeout is negative\r\n"},
		{name: "timeout not a float", cmd: []string{"BLPOP", "lock-signal:n", "soon"}, want: "-ERR timeout is not a float or out of range\r\n"},
		{name: "bad timeout before bad keys", cmd: []string{"BLPOP", "a", "b", "soon"}, want: "-ERR timeout is not a float or out of range\r\n"},
		{name: "two keys", cmd: []string{"BLPOP", "lock-signal:n", "lock-signal:m", "1"}, want: oneKey},
		{name: "not a signal list", cmd: []string{"BLPOP", "jobs", "1"}, want: notSignal},
		{name: "the lock key itself", cmd: []string{"BLPOP", "lock:n", "1"}, want: notSignal},
		{name: "arity", cmd: []string{"BLPOP", "lock-signal:n"}, want: "-ERR wrong number of arguments for 'blpop' command\r\n"},
		{name: "in MULTI", setup: [][]string{{"MULTI"}, {"BLPOP", "lock-signal:n", "0"}}, cmd: []string{"EXEC"},
			want: "-ERR lockproxy serves BLPOP only outside MULTI, where it waits for the lock; nothing was done\r\n"},
	})
}
