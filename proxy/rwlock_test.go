package proxy

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Redisson's RReadWriteLock named "rw" for the thread u:1, as its scripts
// name it.
var (
	rwTimeoutPrefix = "{rw}:u:1:rwlock_timeout"
	rwReadKeys      = []string{"rw", rwTimeoutPrefix}
	rwReadArgs      = []string{"30000", "u:1", "u:1:write"}
	rwLatch         = "redisson_unlock_latch:{rw}:ab"
	rwReadRelease   = []string{"rw", "redisson_rwlock:{rw}", rwTimeoutPrefix, "{rw}", rwLatch}
	rwWriteRelease  = []string{"rw", "redisson_rwlock:{rw}", rwLatch}
	rwForce         = []string{"rw", "redisson_rwlock:{rw}"}
)

var redissonReadAcquireCases = []scriptCase{
	{name: "acquired", keys: rwReadKeys, args: rwReadArgs, want: nullReply, calls: []string{"readacquire rw,{rw} u:1 30s"}},
	{name: "write-held by another", keys: rwReadKeys, args: rwReadArgs,
		answer: failsWith(quorum.Result{HolderTTL: 20 * time.Second}, quorum.ErrNotAcquired), want: ":20000\r\n", calls: []string{"readacquire rw,{rw} u:1 30s"}},
	// A name with a brace is not braced again: its key prefix is the name.
	{name: "name with braces", keys: []string{"{rw}x", "{rw}x:u:1:rwlock_timeout"}, args: rwReadArgs, want: nullReply,
		calls: []string{"readacquire {rw}x,{rw}x u:1 30s"}},
	{name: "lease beyond max_ttl", keys: rwReadKeys, args: []string{"90000", "u:1", "u:1:write"},
		answer: fails(&quorum.TTLError{TTL: 90 * time.Second, Max: time.Minute}),
		want:   "-ERR invalid expire time: Redisson's lease of 90000 ms exceeds max_ttl 60000 ms (a lock taken without a lease time has Config.lockWatchdogTimeout's, 30 s by default: set max_ttl to at least that)\r\n",
		calls:  []string{"readacquire rw,{rw} u:1 1m30s"}},
	{name: "lease zero", keys: rwReadKeys, args: []string{"0", "u:1", "u:1:write"}, want: "-ERR invalid expire time in 'pexpire' command\r\n"},
	{name: "writer of another thread", keys: rwReadKeys, args: []string{"30000", "u:1", "u:2:write"},
		want: "-ERR lockproxy runs Redisson's read lock with the writer field of the reader's own thread, \"u:1:write\" (got \"u:2:write\")\r\n"},
	{name: "timeout prefix of another reader", keys: []string{"rw", "{rw}:u:2:rwlock_timeout"}, args: rwReadArgs,
		want: "-ERR lockproxy runs Redisson's read lock with a timeout prefix of <key prefix>:<reader>:rwlock_timeout, the reader being \"u:1\" (got \"{rw}:u:2:rwlock_timeout\")\r\n"},
	{name: "timeout prefix without a key prefix", keys: []string{"rw", ":u:1:rwlock_timeout"}, args: rwReadArgs,
		want: "-ERR lockproxy runs Redisson's read lock with a timeout prefix of <key prefix>:<reader>:rwlock_timeout, the reader being \"u:1\" (got \":u:1:rwlock_timeout\")\r\n"},
}

var redissonWriteAcquireCases = []scriptCase{
	{name: "acquired", keys: []string{"rw"}, args: []string{"30000", "u:1:write"}, want: nullReply, calls: []string{"writeacquire rw u:1 30s"}},
	{name: "held", keys: []string{"rw"}, args: []string{"30000", "u:1:write"},
		answer: failsWith(quorum.Result{HolderTTL: 5 * time.Second}, quorum.ErrNotAcquired), want: ":5000\r\n", calls: []string{"writeacquire rw u:1 30s"}},
	{name: "reader field", keys: []string{"rw"}, args: []string{"30000", "u:1"},
		want: "-ERR lockproxy runs Redisson's write lock with a writer field of <owner>:write (got \"u:1\")\r\n"},
	{name: "no owner", keys: []string{"rw"}, args: []string{"30000", ":write"},
		want: "-ERR lockproxy runs Redisson's write lock with a writer field of <owner>:write (got \":write\")\r\n"},
	{name: "lease not a number", keys: []string{"rw"}, args: []string{"x", "u:1:write"}, want: "-ERR value is not an integer or out of range\r\n"},
}

// redissonReadReleaseCases are the read unlock's, free answering what a
// lock absent on a quorum answers (1 in 3.27, null in 4.7).
func redissonReadReleaseCases(free string) []scriptCase {
	args := []string{"0", "u:1", "PUBLISH", "13500"}
	call := []string{"readrelease[" + rwLatch + " 13.5s] rw,{rw} u:1"}
	return []scriptCase{
		{name: "released, the lock gone", keys: rwReadRelease, args: args,
			answer: returns(quorum.Result{Released: true, Emptied: true}), want: ":1\r\n", calls: call},
		{name: "released, other readers left", keys: rwReadRelease, args: args,
			answer: returns(quorum.Result{Released: true}), want: ":0\r\n", calls: call},
		{name: "still held", keys: rwReadRelease, args: args, answer: returns(quorum.Result{HoldCount: 1}), want: ":0\r\n", calls: call},
		{name: "not the owner", keys: rwReadRelease, args: args, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: call},
		{name: "free", keys: rwReadRelease, args: args, answer: fails(quorum.ErrAbsent), want: free, calls: call},
		{name: "timeout prefix of another reader", keys: []string{"rw", "redisson_rwlock:{rw}", "{rw}:u:2:rwlock_timeout", "{rw}", rwLatch}, args: args,
			want: "-ERR lockproxy runs Redisson's read unlock with a timeout prefix of the key prefix \"{rw}\", then :<reader>:rwlock_timeout, the reader being \"u:1\" (got \"{rw}:u:2:rwlock_timeout\")\r\n"},
		{name: "latch ttl not a number", keys: rwReadRelease, args: []string{"0", "u:1", "PUBLISH", "x"}, want: "-ERR value is not an integer or out of range\r\n"},
	}
}

// redissonWriteReleaseCases are the write unlock's, free as above.
func redissonWriteReleaseCases(free string) []scriptCase {
	args := []string{"1", "30000", "u:1:write", "PUBLISH", "13500"}
	call := []string{"writerelease[" + rwLatch + " 13.5s] rw u:1 30s"}
	return []scriptCase{
		{name: "released", keys: rwWriteRelease, args: args, answer: returns(quorum.Result{Released: true, Emptied: true}), want: ":1\r\n", calls: call},
		// The writer's own read holds are left: the downgrade.
		{name: "downgraded", keys: rwWriteRelease, args: args, answer: returns(quorum.Result{Released: true}), want: ":1\r\n", calls: call},
		{name: "still held", keys: rwWriteRelease, args: args, answer: returns(quorum.Result{HoldCount: 1}), want: ":0\r\n", calls: call},
		{name: "not the owner", keys: rwWriteRelease, args: args, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: call},
		{name: "free", keys: rwWriteRelease, args: args, answer: fails(quorum.ErrAbsent), want: free, calls: call},
		{name: "reader field", keys: rwWriteRelease, args: []string{"1", "30000", "u:1", "PUBLISH", "13500"},
			want: "-ERR lockproxy runs Redisson's write lock with a writer field of <owner>:write (got \"u:1\")\r\n"},
		{name: "lease zero", keys: rwWriteRelease, args: []string{"1", "0", "u:1:write", "PUBLISH", "13500"},
			want: "-ERR invalid expire time in 'pexpire' command\r\n"},
	}
}

var redissonReadRenewCases = []scriptCase{
	{name: "renewed", keys: []string{"rw", "{rw}"}, args: []string{"30000", "u:1"}, want: ":1\r\n", calls: []string{"renewreads rw,{rw} u:1 30s"}},
	{name: "lost", keys: []string{"rw", "{rw}"}, args: []string{"30000", "u:1"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n",
		calls: []string{"renewreads rw,{rw} u:1 30s"}},
	{name: "lease zero", keys: []string{"rw", "{rw}"}, args: []string{"0", "u:1"}, want: "-ERR invalid expire time in 'pexpire' command\r\n"},
}

// byHold answers each renewal by its lock and owner, "key,prefix owner".
func byHold(answers map[string]func(call) (any, error)) func(call) (any, error) {
	return func(c call) (any, error) {
		if a := answers[c.key+" "+c.token]; a != nil {
			return a(c)
		}
		return nil, nil
	}
}

var redissonReadRenewBatchCases = []scriptCase{
	{name: "one", keys: []string{"rw", "{rw}"}, args: []string{"30000", "1", "u:1"}, want: "*1\r\n:1\r\n", calls: []string{"renewreads rw,{rw} u:1 30s"}},
	{name: "each lock on its readers", keys: []string{"a", "{a}", "b", "{b}"}, args: []string{"30000", "1", "u:1", "2", "u:1", "u:2"},
		answer: byHold(map[string]func(call) (any, error){"a,{a} u:1": fails(quorum.ErrNotHeld), "b,{b} u:1": fails(quorum.ErrNotHeld)}),
		want:   "*2\r\n:0\r\n:1\r\n", calls: []string{"renewreads a,{a} u:1 30s", "renewreads b,{b} u:1 30s", "renewreads b,{b} u:2 30s"}},
	// One reader renewed renews the lock, whatever its other readers'
	// votes.
	{name: "undecided beside one renewed", keys: []string{"a", "{a}"}, args: []string{"30000", "2", "u:1", "u:2"},
		answer: byHold(map[string]func(call) (any, error){"a,{a} u:1": noQuorum}),
		want:   "*1\r\n:1\r\n", calls: []string{"renewreads a,{a} u:1 30s", "renewreads a,{a} u:2 30s"}},
	{name: "a lock undecided", keys: []string{"a", "{a}", "b", "{b}"}, args: []string{"30000", "1", "u:1", "1", "u:1"},
		answer: byHold(map[string]func(call) (any, error){"b,{b} u:1": noQuorum}),
		want:   noQuorumReply, calls: []string{"renewreads a,{a} u:1 30s", "renewreads b,{b} u:1 30s"}},
	{name: "no readers", keys: []string{"a", "{a}"}, args: []string{"30000", "0"}, want: "*1\r\n:0\r\n"},
	{name: "count short of readers", keys: []string{"a", "{a}", "b", "{b}"}, args: []string{"30000", "1", "u:1"},
		want: "-ERR lockproxy runs Redisson's read lock watchdog with, for each lock, a count of readers and as many reader fields (lock 2: count \"\", 0 arguments left)\r\n"},
	{name: "count beyond readers", keys: []string{"a", "{a}"}, args: []string{"30000", "3", "u:1"},
		want: "-ERR lockproxy runs Redisson's read lock watchdog with, for each lock, a count of readers and as many reader fields (lock 1: count \"3\", 1 arguments left)\r\n"},
	{name: "count not a number", keys: []string{"a", "{a}"}, args: []string{"30000", "x", "u:1"},
		want: "-ERR lockproxy runs Redisson's read lock watchdog with, for each lock, a count of readers and as many reader fields (lock 1: count \"x\", 1 arguments left)\r\n"},
	{name: "odd keys", keys: []string{"a", "{a}", "b"}, args: []string{"30000", "1", "u:1"},
		want: "-ERR lockproxy runs Redisson's read lock watchdog with pairs of keys, a lock and its key prefix (got 3 keys)\r\n"},
	{name: "lease zero", keys: []string{"a", "{a}"}, args: []string{"0", "1", "u:1"}, want: "-ERR invalid expire time in 'pexpire' command\r\n"},
}

// redissonRWForceUnlockCases are forceUnlock's of the lock in mode, whose
// message is msg.
func redissonRWForceUnlockCases(msg, mode string) []scriptCase {
	call := []string{"rwdelete/" + mode + " rw"}
	return []scriptCase{
		{name: "deleted", keys: rwForce, args: []string{msg, "PUBLISH"}, answer: returns(true), want: ":1\r\n", calls: call},
		{name: "not in that mode", keys: rwForce, args: []string{msg, "PUBLISH"}, answer: returns(false), want: ":0\r\n", calls: call},
	}
}

var redissonReadLockedCases = []scriptCase{
	{name: "read-locked", keys: []string{"rw"}, answer: returns(true), want: ":1\r\n", calls: []string{"readlocked rw"}},
	{name: "not read-locked", keys: []string{"rw"}, answer: returns(false), want: ":0\r\n", calls: []string{"readlocked rw"}},
	{name: "free", keys: []string{"rw"}, answer: fails(quorum.ErrNotFound), want: ":0\r\n", calls: []string{"readlocked rw"}},
}

// TestRedissonWriteLockMode: RWriteLock.isLocked()'s HGET of "mode" reads
// the read-write lock's mode; HGET of an owner's field its hold count.
func TestRedissonWriteLockMode(t *testing.T) {
	ts := startServer(t, Config{})
	runWireCases(t, ts, []wireCase{
		{name: "write", cmd: []string{"HGET", "rw", "mode"}, answer: returns("write"), want: "$5\r\nwrite\r\n", calls: []string{"rwmode rw"}},
		{name: "read", cmd: []string{"hget", "rw", "mode"}, answer: returns("read"), want: "$4\r\nread\r\n", calls: []string{"rwmode rw"}},
		{name: "free", cmd: []string{"HGET", "rw", "mode"}, answer: fails(quorum.ErrNotFound), want: nullReply, calls: []string{"rwmode rw"}},
		{name: "free RESP3", setup: [][]string{{"HELLO", "3"}}, cmd: []string{"HGET", "rw", "mode"}, answer: fails(quorum.ErrNotFound),
			want: "_\r\n", calls: []string{"rwmode rw"}},
		{name: "no quorum", cmd: []string{"HGET", "rw", "mode"}, answer: noQuorum, want: noQuorumReply, calls: []string{"rwmode rw"}},
		{name: "hold count", cmd: []string{"HGET", "rw", "u:1:write"}, answer: returns(int64(2)), want: "$1\r\n2\r\n", calls: []string{"hashcount rw u:1:write"}},
	})
}

// TestRedissonRWChannel: RReadWriteLock's waiters subscribe to
// redisson_rwlock:{name}, braced as RLock's channel, and are told "1",
// which wakes every waiting thread.
func TestRedissonRWChannel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern bool
		glob    string
		ok      bool
	}{
		{"redisson_rwlock:{rw}", false, "*rw*", true},
		{"redisson_rwlock:n{x}", false, "n{x}", true},
		{"redisson_rwlock:{a*}", false, `*a\**`, true},
		{"redisson_rwlock:rw", false, "", false},
		{"redisson_rwlock:", false, "", false},
		{"redisson_rwlock:*", true, "*", true},
		{"redisson_rwlock*", true, "", false},
	} {
		lc, glob, ok := channelOf(tc.name, tc.pattern)
		if ok != tc.ok || glob != tc.glob || ok && lc != &redissonRWChannel {
			t.Errorf("channelOf(%q, %v) = %q, %v; want %q, %v", tc.name, tc.pattern, glob, ok, tc.glob, tc.ok)
		}
	}
	for key, want := range map[string][]string{"rw": {"redisson_rwlock:{rw}"}, "n{x}": {"redisson_rwlock:n{x}"}} {
		if got := redissonRWChannel.channels(key); !slices.Equal(got, want) {
			t.Errorf("channels of %s: %q, want %q", key, got, want)
		}
	}
	if exp, got := "1", redissonRWChannel.payload("rw"); exp != got {
		t.Errorf("payload %q, want %q", got, exp)
	}
}

// TestRedissonFairLockRefused: RFairLock's scripts, its forceUnlock's
// included, are refused by name with the design's reason, word for word
// (docs/design/rwlock.md, §3).
func TestRedissonFairLockRefused(t *testing.T) {
	const why = "its waiters' FIFO queue (a list) and their timeouts (a sorted set scored by client clocks) would have to be one order agreed by the backends, which is consensus, not a Redlock quorum (docs/design/rwlock.md); use RLock, whose waiters lockproxy wakes by its unlock message"
	ts := startServer(t, Config{})
	var cases []wireCase
	for _, s := range realScripts {
		if !strings.Contains(s.library, "RFairLock") {
			continue
		}
		cases = append(cases, wireCase{name: s.file, cmd: evalCmd(string(readScript(t, s.file)), []string{"k", "k2", "k3"}, []string{"30000", "id", "300000", "1"}),
			want: "-ERR lockproxy does not run this script (sha1 " + s.sha + "): Redisson's RFairLock is not served: " + why + "\r\n"})
	}
	if exp, got := 9, len(cases); exp != got {
		t.Fatalf("%d RFairLock scripts in realScripts, want %d", got, exp)
	}
	runWireCases(t, ts, cases)
}

// TestRedissonRWWakesWaiters: a waiter of a read-write lock through proxy
// A is told "1" on redisson_rwlock:{name} when a release or forceUnlock
// through proxy B leaves the lock free, and not when other readers remain
// or the writer downgrades, as on one Redis.
func TestRedissonRWWakesWaiters(t *testing.T) {
	p := startPubsubPair(t, Config{})
	sub := dialRESP(t, p.addrs[0])
	sub.do("HELLO", "3")
	if _, err := sub.doFrames(2, "SUBSCRIBE", "redisson_rwlock:{rw}", "redisson_rwlock:{rw2}"); err != nil {
		t.Fatal(err)
	}
	b := dialRESP(t, p.addrs[1])
	eval := func(file, want string, keys []string, args ...string) {
		t.Helper()
		if got, err := b.do(evalCmd(string(readScript(t, file)), keys, args)...); err != nil || got != want {
			t.Fatalf("%s %q %q through B: %q (%v), want %q", file, keys, args, got, err, want)
		}
	}
	read := func(name, owner string) {
		t.Helper()
		eval("redisson-4.7.0-readlock-acquire.lua", nullReply, []string{name, "{" + name + "}:" + owner + ":rwlock_timeout"}, "30000", owner, owner+":write")
	}
	unread := func(name, owner, want string) {
		t.Helper()
		eval("redisson-4.7.0-readlock-release.lua", want, []string{name, "redisson_rwlock:{" + name + "}", "{" + name + "}:" + owner + ":rwlock_timeout", "{" + name + "}",
			"redisson_unlock_latch:{" + name + "}:" + owner + strconv.Itoa(rand.IntN(1e9))}, "0", owner, "PUBLISH", "13500")
	}
	write := func(name, owner string) {
		t.Helper()
		eval("redisson-4.7.0-writelock-acquire.lua", nullReply, []string{name}, "30000", owner+":write")
	}
	unwrite := func(name, owner string) {
		t.Helper()
		eval("redisson-4.7.0-writelock-release.lua", ":1\r\n", []string{name, "redisson_rwlock:{" + name + "}", "redisson_unlock_latch:{" + name + "}:" + owner + strconv.Itoa(rand.IntN(1e9))},
			"1", "30000", owner+":write", "PUBLISH", "13500")
	}
	told := func(name string) {
		t.Helper()
		expectFrame(t, sub, pushFrame("message", "redisson_rwlock:{"+name+"}", "1"))
	}

	// Each frame expected is of the other lock than the step before it that
	// must tell nothing: a message told in vain would come first.
	read("rw", "u:1")
	read("rw", "u:2")
	unread("rw", "u:2", ":0\r\n") // u:1 still reads
	write("rw2", "w:1")
	unwrite("rw2", "w:1")
	told("rw2")
	unread("rw", "u:1", ":1\r\n")
	told("rw")

	write("rw2", "u:3")
	read("rw2", "u:3")
	unwrite("rw2", "u:3") // the downgrade: u:3 still reads
	read("rw", "u:1")
	eval("redisson-4.7.0-readlock-forceunlock.lua", ":1\r\n", []string{"rw", "redisson_rwlock:{rw}"}, "0", "PUBLISH")
	told("rw")
	unread("rw2", "u:3", ":1\r\n")
	told("rw2")
}
