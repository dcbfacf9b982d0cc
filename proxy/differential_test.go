package proxy

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// The differential test of the script recogniser: a script sent to the
// proxy must either be refused, or leave the backends in the state a
// plain redis-server is left in by the same script from the same start,
// with the same reply. The proxy runs on a real quorum.Engine over three
// real redis-servers; the reference is a fourth.
//
// Deliberate differences, which the comparison allows:
//   - Error replies are compared as errors, not by text: the proxy never
//     forwards a backend's words.
//   - A PTTL in a reply is the quorum's, less the drift allowance, so it
//     may be shorter than the one server's by that much (and the time
//     between the two EVALs).
//   - Key TTLs are compared within ttlSlack: the two EVALs do not run at
//     the same instant.
//   - bsm/redislock 0.10's obtain over several keys that the token already
//     holds replies null through the proxy, where Redis re-obtains them:
//     lockproxy takes several keys with AcquireAll (knownDifferences).
//   - python-redis-lock's release and reset leave its signal list, KEYS[2],
//     unwritten: its waiters BLPOP through lockproxy, which wakes them from
//     the release itself (signalKinds).
//   - Redisson's scripts (hashKinds) start from hash states, and from
//     another library's string lock, which Redis answers with WRONGTYPE
//     and lockproxy as a lock held by another: only the keys are compared
//     then. The engine's record of each acquisition attempt, a field
//     beside the owner's (quorum/hashlock.go), is not compared.
//   - Redisson's RFencedLock scripts are not run here: their token is
//     lockproxy's fencing token where Redis counts one counter up, and
//     they need an engine with fencing on (TestRedissonWire runs them).
//   - Redisson's read-write lock scripts (rwKinds) start from its states
//     (docs/design/rwlock.md, §4), with the timeout keys of its read
//     holds, and from another library's string lock, as hashKinds do.
//     Every field of the engine's own in a hash (its name starts with a
//     NUL byte) is left out, and so is a release's latch (rwLatchAt). Their PUBLISH is not run on the backends
//     (TestScriptDifferentialRW shows it); the read renewal never
//     shortens the lock nor renews another reader's holds, nor does a
//     read re-entry of 3.10-3.11, 3.44-3.52's watchdog renews what it
//     meant to where its script fails or names other keys, and a write
//     re-entry's PTTL + lease is capped at max_ttl (knownDifferences).

// Starting states of every key a script names.
const (
	stateMine        = "mine"
	stateOther       = "another's"
	stateAbsent      = "absent"
	stateMinePersist = "mine, no expiry"
)

var diffStates = []string{stateMine, stateOther, stateAbsent, stateMinePersist}

// Starting states of a Redisson lock (the first hashKinds keys).
const (
	stateHashMine      = "held by my field"
	stateHashMineTwice = "held twice by my field"
	stateHashOther     = "held by another field"
)

var hashStates = []string{stateHashMine, stateHashMineTwice, stateHashOther, stateAbsent, stateOther}

// Starting states of a Redisson read-write lock (the lock keys of
// rwKinds), as Redisson's scripts leave them; "mine" is diffToken's
// thread, "another" diffOther's. Each read hold has its timeout key.
const (
	stateReadMine         = "read-held by me"
	stateReadOther        = "read-held by another"
	stateReadSeveral      = "read-held by me twice and by another"
	stateWriteMine        = "write-held by me"
	stateWriteOther       = "write-held by another"
	stateWriteMineReading = "write-held twice by me, reading once"
	stateDowngraded       = "read-held by me after a downgrade"
	stateReadLapsed       = "read-held by me beside another whose holds lapsed"
	stateReadOtherLonger  = "read-held by me and by another with a longer lease"
	stateWriteMineLong    = "write-held by me near max_ttl"
)

var rwStates = []string{
	stateAbsent, stateReadMine, stateReadOther, stateReadSeveral, stateWriteMine, stateWriteOther, stateWriteMineReading,
	stateDowngraded, stateReadLapsed, stateReadOtherLonger, stateWriteMineLong, stateOther,
}

// rwKinds are Redisson's read-write lock kinds, each with which of its
// keys are locks; its other keys (channel, latch) start absent, and its
// timeout keys as the lock's state has them.
var rwKinds = map[string][]int{
	"redisson-read-acquire": {0}, "redisson-read-release": {0}, "redisson-read-release-free-null": {0},
	"redisson-write-acquire": {0}, "redisson-write-release": {0}, "redisson-write-release-free-null": {0},
	"redisson-read-renew": {0}, "redisson-read-renew-batch": {0, 2},
	"redisson-read-force-unlock": {0}, "redisson-write-force-unlock": {0}, "redisson-read-locked": {0},
	"redisson-read-acquire-lease": {0}, "redisson-read-release-publish": {0}, "redisson-read-release-command": {0},
	"redisson-write-release-publish": {0}, "redisson-write-release-command": {0},
	"redisson-read-force-unlock-publish": {0}, "redisson-write-force-unlock-publish": {0},
	"redisson-read-renew-pairs": {0, 2}, "redisson-read-renew-pairs-hidden": {0, 2},
}

// statesOf are the starting states a kind is run from.
func statesOf(kind string) []string {
	if _, ok := hashKinds[kind]; ok {
		return hashStates
	}
	if _, ok := rwKinds[kind]; ok {
		return rwStates
	}
	return diffStates
}

// hashKinds are Redisson's kinds, each with how many of its first keys
// are locks (0: all of them); its other keys (channel, latch) start absent.
var hashKinds = map[string]int{
	"redisson-acquire": 1, "redisson-release-latched": 1, "redisson-release": 1, "redisson-release-command": 1,
	"redisson-force-unlock": 1, "redisson-force-unlock-command": 1, "redisson-renew": 1, "redisson-renew-batch": 0,
}

// ownFieldStart starts every field of the engine's own in a hash lock (its
// records of acquisition attempts): no client's.
const ownFieldStart = "\x00"

const (
	diffToken = "tok-1"
	diffOther = "other-2" // bsm/redislock compares a 3-byte prefix
	diffTTL   = "10000"
	// diffSoon stands for the Unix time in ms 10 s after the call.
	diffSoon = "soon"
	// ttlSlack bounds how far apart the two sides' TTLs and PTTL replies
	// may be: the drift allowance of a 10 s TTL (102 ms), and time.
	ttlSlack = 600 * time.Millisecond
)

// diffCall is how a kind's script is called: keys by name (made unique per
// case), and ARGV.
type diffCall struct {
	keys []string
	args []string
}

// diffCalls are the calls each kind is tried with.
var diffCalls = map[string][]diffCall{
	"compare-and-delete":          {{[]string{"k"}, []string{diffToken}}},
	"compare-and-pexpire":         {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"acquire-at":                  {{[]string{"k"}, []string{diffToken, diffSoon}}},
	"delete-all-locks-and-signal": {{nil, nil}},
	// A Unix time 10 s after the call, and one long past.
	"compare-and-pexpireat":        {{[]string{"k"}, []string{diffToken, diffSoon}}, {[]string{"k"}, []string{diffToken, "1000"}}},
	"compare-and-delete-or-absent": {{[]string{"k"}, []string{diffToken}}},
	"compare-and-delete-or-null":   {{[]string{"k"}, []string{diffToken}}},
	// The channel is published on by the reference alone: no state.
	"compare-and-delete-publish-or-null":     {{[]string{"k"}, []string{diffToken, "k-channel:k"}}},
	"compare-and-delete-publish-key-or-null": {{[]string{"k", "ch"}, []string{diffToken}}},
	"compare-and-pexpire-or-null":            {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"compare-and-add-or-set-pttl":            {{[]string{"k"}, []string{diffToken, "5000", "0"}}, {[]string{"k"}, []string{diffToken, diffTTL, "1"}}},
	"extend-or-acquire":                      {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"extend-or-acquire-or-null":              {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"extend-or-acquire-or-conflict":          {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"extend-or-acquire-or-error":             {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"compare-and-delete-or-free-or-error":    {{[]string{"k"}, []string{diffToken}}},
	"owner-ttl-seconds-or-error":             {{[]string{"k"}, []string{diffToken}}},
	"set-if-owner-or-free":                   {{[]string{"k"}, []string{diffToken, diffTTL, "yes"}}, {[]string{"k"}, []string{diffToken, diffTTL, "no"}}},
	"acquire":                                {{[]string{"k"}, []string{diffToken, diffTTL}}},
	"acquire-or-renew":                       {{[]string{"k"}, []string{diffToken, "3", diffTTL}}},
	"owner-pttl":                             {{[]string{"k"}, []string{diffToken}}},
	"owner-pttl-or-zero":                     {{[]string{"k"}, []string{diffToken}}},
	"value-and-pttl":                         {{[]string{"k"}, nil}},
	"compare-and-expire-seconds":             {{[]string{"k", "signal"}, []string{diffToken, "10"}}},
	"compare-and-delete-and-signal":          {{[]string{"k", "signal"}, []string{diffToken, "1000"}}},
	"delete-and-signal":                      {{[]string{"k", "signal"}, []string{diffToken, "1000"}}},
	"multi-acquire":                          {{[]string{"a", "b"}, []string{diffToken, diffTTL}}, {[]string{"a", "a"}, []string{diffToken, diffTTL}}},
	"multi-release-count":                    {{[]string{"a", "b"}, []string{diffToken}}, {[]string{"a", "a"}, []string{diffToken}}},
	"multi-extend":                           {{[]string{"a", "b"}, []string{diffToken, diffTTL}}, {[]string{"a", "a"}, []string{diffToken, diffTTL}}},
	"db-multi-acquire":                       {{[]string{"a", "b"}, []string{"0", diffToken, diffTTL}}, {[]string{"a", "a"}, []string{"0", diffToken, diffTTL}}},
	"db-multi-release-count":                 {{[]string{"a", "b"}, []string{"0", diffToken}}, {[]string{"a", "a"}, []string{"0", diffToken}}},
	"db-multi-extend":                        {{[]string{"a", "b"}, []string{"0", diffToken, diffTTL}}, {[]string{"a", "a"}, []string{"0", diffToken, diffTTL}}},
	"multi-acquire-or-renew":                 {{[]string{"a"}, []string{diffToken, "3", diffTTL}}, {[]string{"a", "b"}, []string{diffToken, "3", diffTTL}}, {[]string{"a", "a"}, []string{diffToken, "3", diffTTL}}},
	"multi-release-all":                      {{[]string{"a", "b"}, []string{diffToken}}, {[]string{"a", "a"}, []string{diffToken}}},
	"multi-pexpire-all":                      {{[]string{"a", "b"}, []string{diffToken, diffTTL}}, {[]string{"a", "a"}, []string{diffToken, diffTTL}}},
	"multi-owner-pttl":                       {{[]string{"a", "b"}, []string{diffToken}}, {[]string{"a", "a"}, []string{diffToken}}},
	"pexpire-any":                            {{[]string{"a", "b"}, []string{diffTTL, ""}}, {[]string{"a", "a"}, []string{diffTTL, ""}}},
	"redisson-acquire":                       {{[]string{"k"}, []string{diffTTL, diffToken}}},
	"redisson-release-latched":               {{[]string{"k", "ch", "latch"}, []string{"0", diffTTL, diffToken, "publish", "5000"}}},
	"redisson-release":                       {{[]string{"k", "ch"}, []string{"0", diffTTL, diffToken}}},
	"redisson-release-command":               {{[]string{"k", "ch"}, []string{"0", diffTTL, diffToken, "publish"}}},
	"redisson-force-unlock":                  {{[]string{"k", "ch"}, []string{"0"}}},
	"redisson-force-unlock-command":          {{[]string{"k", "ch"}, []string{"0", "publish"}}},
	"redisson-renew":                         {{[]string{"k"}, []string{diffTTL, diffToken}}},
	"redisson-renew-batch":                   {{[]string{"a", "b"}, []string{diffTTL, diffToken, diffToken}}, {[]string{"a"}, []string{diffTTL, diffToken}}},
	// A key starting with "{" is named inside the braces: {k} is the key
	// prefix of the lock k, as Redisson names it.
	"redisson-read-acquire":            {{[]string{"k", "{k}:" + diffToken + ":rwlock_timeout"}, []string{diffTTL, diffToken, diffToken + ":write"}}},
	"redisson-read-release":            {{rwReleaseKeys, []string{"0", diffToken, "publish", "5000"}}},
	"redisson-read-release-free-null":  {{rwReleaseKeys, []string{"0", diffToken, "publish", "5000"}}},
	"redisson-write-acquire":           {{[]string{"k"}, []string{diffTTL, diffToken + ":write"}}},
	"redisson-write-release":           {{[]string{"k", "ch", "latch"}, []string{"1", diffTTL, diffToken + ":write", "publish", "5000"}}},
	"redisson-write-release-free-null": {{[]string{"k", "ch", "latch"}, []string{"1", diffTTL, diffToken + ":write", "publish", "5000"}}},
	"redisson-read-renew":              {{[]string{"k", "{k}"}, []string{diffTTL, diffToken}}},
	"redisson-read-renew-batch": {
		{[]string{"a", "{a}", "b", "{b}"}, []string{diffTTL, "1", diffToken, "1", diffToken}},
		{[]string{"a", "{a}"}, []string{diffTTL, "2", diffToken, diffOther}},
	},
	"redisson-read-force-unlock":  {{[]string{"k", "ch"}, []string{"0", "publish"}}},
	"redisson-write-force-unlock": {{[]string{"k", "ch"}, []string{"1", "publish"}}},
	"redisson-read-locked":        {{[]string{"k"}, nil}},
	// The layouts before 3.24 (no latch; 'publish' to 3.21.3, then the
	// command as an argument) and the watchdogs of 3.44.0 to 4.3.1.
	"redisson-read-acquire-lease":         {{[]string{"k", "{k}:" + diffToken + ":rwlock_timeout"}, []string{diffTTL, diffToken, diffToken + ":write"}}},
	"redisson-read-release-publish":       {{rwReleaseKeys[:4], []string{"0", diffToken}}},
	"redisson-read-release-command":       {{rwReleaseKeys[:4], []string{"0", diffToken, "publish"}}},
	"redisson-write-release-publish":      {{[]string{"k", "ch"}, []string{"1", diffTTL, diffToken + ":write"}}},
	"redisson-write-release-command":      {{[]string{"k", "ch"}, []string{"1", diffTTL, diffToken + ":write", "publish"}}},
	"redisson-read-force-unlock-publish":  {{[]string{"k", "ch"}, []string{"0"}}},
	"redisson-write-force-unlock-publish": {{[]string{"k", "ch"}, []string{"1"}}},
	"redisson-read-renew-pairs": {
		{[]string{"a", "{a}", "b", "{b}"}, []string{diffTTL, diffToken, diffToken}},
		{[]string{"a", "{a}"}, []string{diffTTL, diffToken}},
	},
	"redisson-read-renew-pairs-hidden": {
		{[]string{"a", "{a}", "b", "{b}"}, []string{diffTTL, diffToken, diffToken}},
		{[]string{"a", "{a}"}, []string{diffTTL, diffToken}},
	},
}

// rwReleaseKeys are a read unlock's: the lock, channel, timeout prefix,
// key prefix and latch.
var rwReleaseKeys = []string{"k", "ch", "{k}:" + diffToken + ":rwlock_timeout", "{k}", "latch"}

// pttlKinds reply with a PTTL (or hold one in their reply).
var pttlKinds = map[string]bool{
	"owner-pttl": true, "owner-pttl-or-zero": true, "value-and-pttl": true, "multi-owner-pttl": true, "redisson-acquire": true,
	"redisson-read-acquire": true, "redisson-write-acquire": true, "redisson-read-acquire-lease": true,
}

// signalKinds name a signal list in KEYS[2] that lockproxy does not write:
// neither side's KEYS[2] is compared.
var signalKinds = map[string]bool{"compare-and-delete-and-signal": true, "delete-and-signal": true}

// rwLatchAt is where the read-write lock's releases name their latch,
// which is not compared: the engine records its own outcome of the
// release there ("0" held, "2" released with others left, "1" gone, and
// nothing for a lock absent on a quorum), not Redisson's reply, and only
// the engine reads it, on a retry of the same request.
var rwLatchAt = map[string]int{
	"redisson-read-release": 4, "redisson-read-release-free-null": 4,
	"redisson-write-release": 2, "redisson-write-release-free-null": 2,
}

// knownDifferences are the calls where lockproxy deliberately answers
// otherwise than one Redis (see the file comment), by kind, keys,
// arguments and starting state.
var knownDifferences = map[string]string{
	`multi-acquire-or-renew [a b] ["tok-1" "3" "10000"] mine`:            "several keys are taken with AcquireAll, which does not re-obtain",
	`multi-acquire-or-renew [a b] ["tok-1" "3" "10000"] mine, no expiry`: "several keys are taken with AcquireAll, which does not re-obtain",
	// A lock without expiry cannot be taken through lockproxy (every
	// acquisition has a TTL); one set on the backends by other means is
	// extended by these two, where their scripts refuse it.
	`compare-and-add-or-set-pttl [k] ["tok-1" "10000" "1"] mine, no expiry`: "a key without expiry is extended",
	`compare-and-expire-seconds [k signal] ["tok-1" "10"] mine, no expiry`:  "a key without expiry is extended",
	// docs/design/rwlock.md, §2: over a quorum, a shorter lock would end
	// another reader's hold before the validity it was told of.
	`redisson-read-renew [k {k}] ["10000" "tok-1"] ` + stateReadOtherLonger:                             "a read renewal never shortens the lock, nor renews another reader's holds",
	`redisson-read-renew-batch [a {a} b {b}] ["10000" "1" "tok-1" "1" "tok-1"] ` + stateReadOtherLonger: "a read renewal never shortens the lock",
	`redisson-read-renew-batch [a {a}] ["10000" "2" "tok-1" "other-2"] ` + stateReadOtherLonger:         "a read renewal never shortens the lock",
	// The renewal of a hold the quorum counts gives back its timeout keys
	// where they lapsed: a release would otherwise sweep the hold away.
	`redisson-read-renew-batch [a {a}] ["10000" "2" "tok-1" "other-2"] ` + stateReadLapsed: "a read renewal gives back a lapsed timeout key",
	// Redisson 3.10.0 to 3.11.0: a read re-entry set the lease as the
	// lock's TTL, shortening it below another's hold; the engine keeps the
	// longer, as 3.11.1 on does.
	`redisson-read-acquire-lease [k {k}:tok-1:rwlock_timeout] ["10000" "tok-1" "tok-1:write"] ` + stateReadOtherLonger: "a read re-entry never shortens the lock",
	`redisson-read-acquire-lease [k {k}:tok-1:rwlock_timeout] ["10000" "tok-1" "tok-1:write"] ` + stateWriteMineLong:   "a read re-entry never shortens the lock",
	// Redisson 3.44.0 to 4.3.1 renew as 3.27 does, one reader per lock.
	`redisson-read-renew-pairs [a {a} b {b}] ["10000" "tok-1" "tok-1"] ` + stateReadOtherLonger:        "a read renewal never shortens the lock, nor renews another reader's holds",
	`redisson-read-renew-pairs [a {a}] ["10000" "tok-1"] ` + stateReadOtherLonger:                      "a read renewal never shortens the lock, nor renews another reader's holds",
	`redisson-read-renew-pairs-hidden [a {a} b {b}] ["10000" "tok-1" "tok-1"] ` + stateReadOtherLonger: "a read renewal never shortens the lock, nor renews another reader's holds",
	`redisson-read-renew-pairs-hidden [a {a}] ["10000" "tok-1"] ` + stateReadOtherLonger:               "a read renewal never shortens the lock, nor renews another reader's holds",
	// 3.44.0 to 3.52.0 name hold c's timeout key KEYS[c+1] (the inner
	// loop's i hides the pair's): the second lock's under the first's
	// prefix, and past #KEYS a Lua error. The engine renews the reader's
	// own holds, as 4.0.0 meant to.
	`redisson-read-renew-pairs-hidden [a {a} b {b}] ["10000" "tok-1" "tok-1"] ` + stateDowngraded: "a read renewal renews the second lock's holds",
	`redisson-read-renew-pairs-hidden [a {a}] ["10000" "tok-1"] ` + stateReadSeveral:              "a read renewal of a reader with two holds does not fail",
	`redisson-read-renew-pairs-hidden [a {a}] ["10000" "tok-1"] ` + stateWriteMineReading:         "a read renewal of a writer with two holds does not fail",
	// The lease horizon (docs/design/horizon.md) bounds every lock's TTL.
	`redisson-write-acquire [k] ["10000" "tok-1:write"] ` + stateWriteMineLong: "a write re-entry's PTTL + lease is capped at max_ttl",
}

func differenceKey(kind string, call diffCall, state string) string {
	return fmt.Sprintf("%s %v %q %s", kind, call.keys, call.args, state)
}

// differential is a proxy on three redis-servers beside a reference one.
type differential struct {
	proxy, reference *respConn
	// proxyAddr and referenceAddr are where to open more connections.
	proxyAddr, referenceAddr string
	backends                 []*respConn
	backendAddr              string       // the first backend's
	cases                    atomic.Int64 // unique key prefixes
	// settle is how long the backends may take to match the reference
	// after the reply (0: 3 s).
	settle time.Duration
}

func startDifferential(t testing.TB) *differential {
	t.Helper()
	servers := redistest.StartN(t, 4)
	var urls []string
	for _, s := range servers[:3] {
		urls = append(urls, s.URL())
	}
	addr, _ := serveEngine(t, quorum.Config{
		Backends: urls, NodeTimeout: 500 * time.Millisecond,
		DisableRestartQuarantine: true, // fresh servers: nothing to forget
	}, Config{})
	d := &differential{proxy: dialRESP(t, addr), reference: dialRESP(t, servers[3].Addr()), proxyAddr: addr, referenceAddr: servers[3].Addr(),
		backendAddr: servers[0].Addr()}
	for _, s := range servers[:3] {
		d.backends = append(d.backends, dialRESP(t, s.Addr()))
	}
	return d
}

// respConn is a raw RESP connection whose errors are returned, not fatal:
// a fuzz target's set-up outlives each input's *testing.T.
type respConn struct {
	conn net.Conn
	rd   *bufio.Reader
}

func dialRESP(t testing.TB, addr string) *respConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &respConn{conn: conn, rd: bufio.NewReader(conn)}
}

func (c *respConn) do(args ...string) (string, error) {
	c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.conn, encode(args...)); err != nil {
		return "", err
	}
	return readReply(c.rd)
}

type keyView struct {
	typ, value string
	pttl       int64 // -1: no expiry
}

// run runs script with call from state on both sides and returns an
// error describing any difference; refused reports that the proxy refused
// the script.
func (d *differential) run(script string, call diffCall, state string) (refused bool, err error) {
	prefix := fmt.Sprintf("c%d:", d.cases.Add(1))
	keys := make([]string, len(call.keys))
	for i, k := range call.keys {
		if inner, ok := strings.CutPrefix(k, "{"); ok {
			keys[i] = "{" + prefix + inner
			continue
		}
		keys[i] = prefix + k
	}
	kind := classify([]byte(script))
	stated := keys
	if kind != nil {
		if n, ok := hashKinds[kind.name]; ok && n > 0 {
			stated = keys[:min(n, len(keys))]
		}
		if at, ok := rwKinds[kind.name]; ok {
			stated = nil
			for _, i := range at {
				if i < len(keys) {
					stated = append(stated, keys[i])
				}
			}
		}
	}
	all := append([]*respConn{d.reference}, d.backends...)
	for _, c := range all {
		if err := setState(c, stated, state); err != nil {
			return false, err
		}
	}
	args := slices.Clone(call.args)
	for i, a := range args {
		if a == diffSoon {
			args[i] = strconv.FormatInt(time.Now().Add(10*time.Second).UnixMilli(), 10)
		}
	}
	eval := append([]string{"EVAL", script, strconv.Itoa(len(keys))}, append(keys, args...)...)
	raw, err := d.proxy.do(eval...)
	if err != nil {
		return false, err
	}
	if strings.HasPrefix(raw, "-ERR lockproxy does not run this script") {
		return true, nil
	}
	rawRef, err := d.reference.do(eval...)
	if err != nil {
		return false, err
	}
	if kind == nil {
		return false, fmt.Errorf("served without a kind: %q", raw)
	}
	tolerance := int64(0)
	if pttlKinds[kind.name] {
		tolerance = ttlSlack.Milliseconds()
	}
	_, hashKind := hashKinds[kind.name]
	_, rwKind := rwKinds[kind.name]
	wrongType := (hashKind || rwKind) && strings.HasPrefix(rawRef, "-WRONGTYPE")
	if why := sameReply(parseRESP(raw), parseRESP(rawRef), tolerance); why != "" && !wrongType {
		return false, fmt.Errorf("as %s: reply %q, Redis %q: %s", kind.name, raw, rawRef, why)
	}
	ref, err := keysOf(d.reference, prefix)
	if err != nil {
		return false, err
	}
	compared := func(views map[string]keyView) map[string]keyView {
		if signalKinds[kind.name] {
			delete(views, keys[1])
		}
		if at, ok := rwLatchAt[kind.name]; ok {
			delete(views, keys[at])
		}
		return views
	}
	ref = compared(ref)
	refAt := time.Now()
	// The last backend's write may land after the quorum's answer, and a
	// rollback after it: wait for the backends to settle. Their TTLs are
	// compared with the reference's as it would be at the same instant, so
	// that waiting cannot make a longer TTL look right.
	deadline := time.Now().Add(cmp.Or(d.settle, 3*time.Second))
	for i, b := range d.backends {
		for {
			got, err := keysOf(b, prefix)
			if err != nil {
				return false, err
			}
			why := sameKeys(compared(got), ref, time.Since(refAt))
			if why == "" {
				break
			}
			if time.Now().After(deadline) {
				return false, fmt.Errorf("as %s: backend %d differs from Redis: %s", kind.name, i, why)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition of the backends
		}
	}
	return false, nil
}

// emptyKeys deletes every key but lockproxy's own ({lockproxy}:...: the
// backend set record and the marker, without which the engine would count
// the backend only once it records the set again).
const emptyKeys = `for _, k in ipairs(redis.call("KEYS", "*")) do
	if string.sub(k, 1, 12) ~= "{lockproxy}:" then redis.call("DEL", k) end
end
return 1`

func setState(c *respConn, keys []string, state string) error {
	if _, err := c.do("EVAL", emptyKeys, "0"); err != nil {
		return err
	}
	for _, k := range keys {
		var cmd []string
		switch state {
		case stateMine:
			cmd = []string{"SET", k, diffToken, "PX", diffTTL}
		case stateOther:
			cmd = []string{"SET", k, diffOther, "PX", diffTTL}
		case stateMinePersist:
			cmd = []string{"SET", k, diffToken}
		case stateHashMine, stateHashMineTwice, stateHashOther:
			if err := setHashState(c, k, state); err != nil {
				return err
			}
			continue
		case stateReadMine, stateReadOther, stateReadSeveral, stateWriteMine, stateWriteOther, stateWriteMineReading,
			stateDowngraded, stateReadLapsed, stateReadOtherLonger, stateWriteMineLong:
			if err := setRWState(c, k, state); err != nil {
				return err
			}
			continue
		default:
			continue
		}
		if r, err := c.do(cmd...); err != nil || r != "+OK\r\n" {
			return fmt.Errorf("setting %s: %q %v", k, r, err)
		}
	}
	return nil
}

// setHashState makes k a Redisson lock held by a field, as Redisson's
// acquisition leaves it.
func setHashState(c *respConn, k, state string) error {
	field, count := diffToken, "1"
	switch state {
	case stateHashMineTwice:
		count = "2"
	case stateHashOther:
		field = diffOther
	}
	for _, cmd := range [][]string{{"HSET", k, field, count}, {"PEXPIRE", k, diffTTL}} {
		if r, err := c.do(cmd...); err != nil || r != ":1\r\n" {
			return fmt.Errorf("setting %s: %q %v", k, r, err)
		}
	}
	return nil
}

// rwHold is one owner's field in a read-write lock, with its count, and
// the PTTL in ms of each of its read holds' timeout keys (none for a
// writer's field, and none left for lapsed holds).
type rwHold struct {
	field string
	count int
	holds []int
}

// rwStateOf is each read-write lock state: its mode, fields and the
// lock's PTTL.
var rwStateOf = map[string]struct {
	mode  string
	pttl  int
	holds []rwHold
}{
	stateReadMine:  {"read", 10000, []rwHold{{diffToken, 1, []int{10000}}}},
	stateReadOther: {"read", 10000, []rwHold{{diffOther, 1, []int{10000}}}},
	stateReadSeveral: {"read", 10000, []rwHold{
		{diffToken, 2, []int{10000, 10000}}, {diffOther, 1, []int{10000}}}},
	stateWriteMine:  {"write", 10000, []rwHold{{diffToken + ":write", 1, nil}}},
	stateWriteOther: {"write", 10000, []rwHold{{diffOther + ":write", 1, nil}}},
	stateWriteMineReading: {"write", 10000, []rwHold{
		{diffToken + ":write", 2, nil}, {diffToken, 1, []int{10000}}}},
	// The read hold was taken before the write hold went: its lease is
	// shorter than the lock's.
	stateDowngraded: {"read", 10000, []rwHold{{diffToken, 1, []int{6000}}}},
	stateReadLapsed: {"read", 10000, []rwHold{{diffToken, 1, []int{10000}}, {diffOther, 1, nil}}},
	stateReadOtherLonger: {"read", 20000, []rwHold{
		{diffToken, 1, []int{10000}}, {diffOther, 1, []int{20000}}}},
	// Below the proxy's max_ttl (60 s) by less than a lease.
	stateWriteMineLong: {"write", 55000, []rwHold{{diffToken + ":write", 1, nil}}},
}

// setRWState makes k a Redisson read-write lock in state, as Redisson's
// scripts leave it: the hash, and the timeout keys of its read holds
// under the key prefix {k}.
func setRWState(c *respConn, k, state string) error {
	st := rwStateOf[state]
	cmds := [][]string{{"HSET", k, "mode", st.mode}}
	for _, h := range st.holds {
		cmds = append(cmds, []string{"HSET", k, h.field, strconv.Itoa(h.count)})
		for i, pttl := range h.holds {
			cmds = append(cmds, []string{"SET", fmt.Sprintf("{%s}:%s:rwlock_timeout:%d", k, h.field, i+1), "1", "PX", strconv.Itoa(pttl)})
		}
	}
	cmds = append(cmds, []string{"PEXPIRE", k, strconv.Itoa(st.pttl)})
	for _, cmd := range cmds {
		if r, err := c.do(cmd...); err != nil || r != ":1\r\n" && r != "+OK\r\n" {
			return fmt.Errorf("setting %s: %q %v", k, r, err)
		}
	}
	return nil
}

// keysOf returns every key of the server but those of other cases.
func keysOf(c *respConn, prefix string) (map[string]keyView, error) {
	raw, err := c.do("KEYS", "*")
	if err != nil {
		return nil, err
	}
	views := map[string]keyView{}
	for _, k := range parseRESP(raw).array {
		name := k.str
		if strings.HasPrefix(name, "c") && strings.Contains(name, ":") && !strings.HasPrefix(name, prefix) ||
			strings.HasPrefix(name, "{c") && !strings.HasPrefix(name, "{"+prefix) {
			continue // a late write of an earlier case
		}
		if strings.HasPrefix(name, quorum.ReservedPrefix) {
			continue // lockproxy's own: its marker, set record and fencing tokens
		}
		var v keyView
		if r, err := c.do("TYPE", name); err == nil {
			v.typ = parseRESP(r).str
		}
		switch v.typ {
		case "string":
			r, _ := c.do("GET", name)
			v.value = parseRESP(r).str
		case "hash":
			r, _ := c.do("HGETALL", name)
			v.value = hashView(parseRESP(r).array)
		}
		r, err := c.do("PTTL", name)
		if err != nil {
			return nil, err
		}
		v.pttl = parseRESP(r).integer
		views[name] = v
	}
	return views, nil
}

// hashView is a hash's fields and values as one text, but for the
// engine's own fields.
func hashView(pairs []parsedReply) string {
	var fields []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.HasPrefix(pairs[i].str, ownFieldStart) {
			fields = append(fields, pairs[i].str+"="+pairs[i+1].str)
		}
	}
	slices.Sort(fields)
	return strings.Join(fields, " ")
}

// sameKeys returns why got differs from want, read later by since, or "".
func sameKeys(got, want map[string]keyView, since time.Duration) string {
	for name, w := range want {
		g, ok := got[name]
		if ok && g.pttl >= 0 {
			g.pttl += since.Milliseconds()
		}
		switch {
		case !ok:
			return fmt.Sprintf("%s missing (Redis has %+v)", name, w)
		case g.typ != w.typ || g.value != w.value:
			return fmt.Sprintf("%s is %+v, Redis %+v", name, g, w)
		case (g.pttl < 0) != (w.pttl < 0) || abs(g.pttl-w.pttl) > ttlSlack.Milliseconds():
			return fmt.Sprintf("%s has PTTL %d, Redis %d", name, g.pttl, w.pttl)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			return fmt.Sprintf("%s is there (%+v), not in Redis", name, g)
		}
	}
	return ""
}

func abs(n int64) int64 { return max(n, -n) }

// reply is a parsed reply.
type parsedReply struct {
	kind    byte // '+', '-', ':', '$', '*', or '_' for null
	str     string
	integer int64
	array   []parsedReply
}

func parseRESP(raw string) parsedReply {
	v, _ := parseRESPAt(raw)
	return v
}

func parseRESPAt(raw string) (parsedReply, string) {
	line, rest, _ := strings.Cut(raw, "\r\n")
	if line == "" {
		return parsedReply{kind: '_'}, rest
	}
	head, n := line[0], line[1:]
	switch head {
	case '+', '-':
		return parsedReply{kind: head, str: n}, rest
	case ':':
		i, _ := strconv.ParseInt(n, 10, 64)
		return parsedReply{kind: ':', integer: i}, rest
	case '$':
		size, _ := strconv.Atoi(n)
		if size < 0 {
			return parsedReply{kind: '_'}, rest
		}
		return parsedReply{kind: '$', str: rest[:size]}, rest[size+2:]
	case '*':
		size, _ := strconv.Atoi(n)
		if size < 0 {
			return parsedReply{kind: '_'}, rest
		}
		v := parsedReply{kind: '*'}
		for range size {
			var e parsedReply
			e, rest = parseRESPAt(rest)
			v.array = append(v.array, e)
		}
		return v, rest
	}
	return parsedReply{kind: '_'}, rest
}

// sameReply returns why two replies differ, or "".
func sameReply(got, want parsedReply, tolerance int64) string {
	switch {
	case got.kind != want.kind:
		return fmt.Sprintf("a %c reply where Redis gives %c", got.kind, want.kind)
	case got.kind == '-':
		return "" // both errors: texts are not compared
	case got.kind == ':' && abs(got.integer-want.integer) > tolerance:
		return fmt.Sprintf("%d, not %d", got.integer, want.integer)
	case got.str != want.str:
		return fmt.Sprintf("%q, not %q", got.str, want.str)
	case len(got.array) != len(want.array):
		return "arrays of different lengths"
	}
	for i := range got.array {
		if why := sameReply(got.array[i], want.array[i], tolerance); why != "" {
			return fmt.Sprintf("element %d: %s", i+1, why)
		}
	}
	return ""
}

// check runs script in every state with every call of the kind whose
// arguments it takes, and returns how it went.
func (d *differential) check(script, argsOf string) (refused bool, err error) {
	if kind := classify([]byte(script)); kind != nil && kind.fencing {
		return false, nil // its reply is lockproxy's fencing token, by design (file comment)
	}
	calls := diffCalls[argsOf]
	if len(calls) == 0 {
		return false, fmt.Errorf("no calls for kind %s", argsOf)
	}
	states := diffStates
	if kind := classify([]byte(script)); kind != nil {
		states = statesOf(kind.name)
	}
	for _, call := range calls {
		for _, state := range states {
			if kind := classify([]byte(script)); kind != nil {
				if _, known := knownDifferences[differenceKey(kind.name, call, state)]; known {
					continue
				}
			}
			r, err := d.run(script, call, state)
			if err != nil {
				return false, fmt.Errorf("keys %v args %q from %s: %w", call.keys, call.args, state, err)
			}
			if r {
				return true, nil // refused: no state of it to compare
			}
		}
	}
	return false, nil
}

// kindOf returns the kind whose arguments a recognised script takes, or
// the name given.
func kindOf(script, otherwise string) string {
	if k := classify([]byte(script)); k != nil {
		return k.name
	}
	return otherwise
}

// TestScriptDifferentialLibraries runs every library's recognised script
// against Redis: lockproxy's reading of each, in each state.
func TestScriptDifferentialLibraries(t *testing.T) {
	d := startDifferential(t)
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		t.Run(s.file, func(t *testing.T) {
			refused, err := d.check(string(readScript(t, s.file)), s.kind)
			if err != nil {
				t.Fatal(err)
			}
			if refused {
				t.Fatal("refused")
			}
		})
	}
}

// TestScriptDifferentialCorpus runs the near-miss corpus: each script is
// refused or does what Redis does, and the recogniser's decision is the
// one the corpus expects (so that the test keeps testing something).
func TestScriptDifferentialCorpus(t *testing.T) {
	d := startDifferential(t)
	corpus := nearMisses()
	if len(corpus) < 100 {
		t.Fatalf("the corpus has %d scripts, fewer than 100", len(corpus))
	}
	for _, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			refused, err := d.check(c.script, kindOf(c.script, c.argsOf))
			if err != nil {
				t.Fatal(err)
			}
			if refused == c.served {
				t.Fatalf("served %v, the corpus expects %v; script:\n%s", !refused, c.served, c.script)
			}
		})
	}
}

// errDifferent marks a served script that did not do what Redis does.
var errDifferent = errors.New("differs from Redis")

// FuzzScriptDifferential compares what the proxy does with a script with
// what a real redis-server does: any input the recogniser serves must
// leave the same reply and state. Most inputs are refused at once.
func FuzzScriptDifferential(f *testing.F) {
	for _, s := range realScripts {
		if s.kind != "" {
			f.Add(string(readScript(f, s.file)))
		}
	}
	for _, c := range nearMisses() {
		f.Add(c.script)
	}
	d := startDifferential(f)
	f.Fuzz(func(t *testing.T, script string) {
		kind := classify([]byte(script))
		if kind == nil {
			return
		}
		if _, err := d.check(script, kind.name); err != nil {
			t.Fatalf("%v: %v; script:\n%s", errDifferent, err, script)
		}
	})
}

// mutate returns a script one token away from body: a token deleted,
// doubled, swapped with the next, or replaced by or preceded with one
// from vocabulary.
func mutate(body string, pick func(int) int, vocabulary []string) string {
	toks := splitTokens(body)
	i := pick(len(toks))
	t := slices.Clone(toks)
	word := vocabulary[pick(len(vocabulary))]
	switch pick(5) {
	case 0:
		t = slices.Delete(t, i, i+1)
	case 1:
		t = slices.Insert(t, i, t[i])
	case 2:
		if i+1 < len(t) {
			t[i], t[i+1] = t[i+1], t[i]
		}
	case 3:
		t[i] = word
	default:
		t = slices.Insert(t, i, word)
	}
	return strings.Join(t, "")
}

// splitTokens splits Lua source roughly into tokens, each with the space
// before it: enough to mutate, not to read (luaform reads).
func splitTokens(src string) []string {
	var out []string
	for i := 0; i < len(src); {
		j := i
		for j < len(src) && strings.IndexByte(" \t\r\n", src[j]) >= 0 {
			j++
		}
		k := j
		switch {
		case k >= len(src):
		case isWordStart(src[k]):
			for k < len(src) && (isWordStart(src[k]) || src[k] >= '0' && src[k] <= '9') {
				k++
			}
		case src[k] >= '0' && src[k] <= '9':
			for k < len(src) && src[k] >= '0' && src[k] <= '9' {
				k++
			}
		case src[k] == '"' || src[k] == '\'':
			k++
			for k < len(src) && src[k] != src[j] && src[k] != '\n' {
				k++
			}
			k = min(k+1, len(src))
		case strings.HasPrefix(src[k:], "==") || strings.HasPrefix(src[k:], "~=") || strings.HasPrefix(src[k:], "<=") ||
			strings.HasPrefix(src[k:], ">=") || strings.HasPrefix(src[k:], "..") || strings.HasPrefix(src[k:], "--"):
			k += 2
		default:
			k++
		}
		out = append(out, src[i:k])
		i = k
	}
	return out
}

func isWordStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// mutationVocabulary are tokens a mutant may gain: every token of every
// recognised body, and the review's tricks.
func mutationVocabulary() []string {
	seen := map[string]bool{}
	var words []string
	add := func(w string) {
		if !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	for _, k := range scriptKinds {
		for _, b := range k.bodies {
			for _, t := range splitTokens(b) {
				add(" " + strings.TrimLeft(t, " \t\r\n"))
			}
		}
	}
	for _, w := range []string{
		";", " ;", "--\r", "--\n", "\r", "--[[", "]]", "[[", " keys", " argv", " KEYS", " ARGV", "[2]", "[0]",
		" tonumber(", ",", " 10", " nil", " not", " pcall", " redis.pcall", " REDIS", " Redis", " IF", " THEN", " END",
		" local", " x", " =", " (", " )", " #", "'", "\"", "\\", " ~=", " ==", " ..", " -", " +", " true", " false",
		" 'DEL'", " \"GET\"", " \"incr\"", " \"set\"", " 'NX'", " 'XX'", " 'ok'", " \"YES\"", " -1", " 2",
	} {
		add(w)
	}
	return words
}

var mutantsPerBody = flag.Int("differential.mutants", 100, "mutants of each recognised body that TestScriptDifferentialMutants tries")

// TestScriptDifferentialMutants mutates every recognised library body one
// token at a time; each mutant the recogniser serves must do what Redis
// does. go test -run Mutants -differential.mutants=20000 runs a long one.
func TestScriptDifferentialMutants(t *testing.T) {
	d := startDifferential(t)
	vocabulary := mutationVocabulary()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { return rng.IntN(n) }
	tried, served := 0, 0
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		body := string(readScript(t, s.file))
		seen := map[string]bool{body: true}
		for range *mutantsPerBody {
			m := mutate(body, pick, vocabulary)
			if seen[m] {
				continue
			}
			seen[m] = true
			tried++
			kind := classify([]byte(m))
			if kind == nil {
				continue
			}
			served++
			if _, err := d.check(m, kind.name); err != nil {
				t.Errorf("%s mutant served as %s: %v; mutant:\n%s", s.file, kind.name, err, m)
			}
		}
	}
	t.Logf("%d distinct mutants, %d served and compared with Redis", tried, served)
	if served == 0 {
		t.Fatal("no mutant was served: the comparison compared nothing")
	}
}

// TestScriptDifferentialKnownDifferences checks that every difference the
// list allows is still one: the list must not excuse what it need not.
func TestScriptDifferentialKnownDifferences(t *testing.T) {
	d := startDifferential(t)
	// A difference in the keys lasts: waiting the whole 3 s for each one
	// to go would only cost time. The backends' last writes land within
	// milliseconds of the reply.
	d.settle = 200 * time.Millisecond
	tried := map[string]bool{}
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		for _, call := range diffCalls[s.kind] {
			for _, state := range statesOf(s.kind) {
				key := differenceKey(s.kind, call, state)
				if _, known := knownDifferences[key]; !known {
					continue
				}
				tried[key] = true
				if _, err := d.run(string(readScript(t, s.file)), call, state); err == nil {
					t.Errorf("%s: %s does what Redis does; drop it from knownDifferences", s.file, key)
				}
			}
		}
	}
	for key := range knownDifferences {
		if !tried[key] {
			t.Errorf("knownDifferences lists %s, which no call of the tests makes", key)
		}
	}
}

// TestScriptDifferentialRW checks what the script differential does not:
// the read-write lock's reads by command, and the one difference that no
// key shows.
func TestScriptDifferentialRW(t *testing.T) {
	d := startDifferential(t)
	t.Run("reads", func(t *testing.T) { d.checkRWReads(t) })
	t.Run("no publish", func(t *testing.T) { d.checkRWNoPublish(t) })
}

// checkRWReads reads a read-write lock in each state as Redisson does,
// through the proxy and on one Redis: the write lock's isLocked() (HGET
// of "mode"), isHeldByCurrentThread(), getHoldCount() and
// remainTimeToLive() of the read and the write lock.
func (d *differential) checkRWReads(t *testing.T) {
	for _, state := range rwStates {
		prefix := fmt.Sprintf("c%d:", d.cases.Add(1))
		k := prefix + "k"
		for _, c := range append([]*respConn{d.reference}, d.backends...) {
			if err := setState(c, []string{k}, state); err != nil {
				t.Fatal(err)
			}
		}
		for _, cmd := range [][]string{
			{"HGET", k, "mode"}, {"HEXISTS", k, diffToken}, {"HEXISTS", k, diffToken + ":write"},
			{"HGET", k, diffToken}, {"HGET", k, diffToken + ":write"}, {"PTTL", k},
		} {
			got, err := d.proxy.do(cmd...)
			if err != nil {
				t.Fatal(err)
			}
			want, err := d.reference.do(cmd...)
			if err != nil {
				t.Fatal(err)
			}
			// Another library's string lock: Redis refuses the hash read,
			// lockproxy answers that no read-write lock is there.
			wrongType := strings.HasPrefix(want, "-WRONGTYPE") && (got == nullReply || got == ":0\r\n")
			if why := sameReply(parseRESP(got), parseRESP(want), ttlSlack.Milliseconds()); why != "" && !wrongType {
				t.Errorf("%s: %q: %q, Redis %q: %s", state, cmd[0]+" "+cmd[2], got, want, why)
			}
		}
	}
}

// checkRWNoPublish shows the read-write lock's one difference that no key
// shows: its unlocks and forceUnlocks publish the unlock message on one
// Redis, and nothing on the backends, where every proxy tells its own
// subscribers (redissonRWChannel). A subscriber to every case's channel
// hears the script's message first on the reference, and on a backend the
// marker published after the script.
func (d *differential) checkRWNoPublish(t *testing.T) {
	for _, c := range []struct{ file, state, message string }{
		{"redisson-4.7.0-readlock-release.lua", stateReadMine, "0"},
		{"redisson-3.27.2-writelock-release.lua", stateWriteMine, "1"},
		{"redisson-4.7.0-writelock-forceunlock.lua", stateWriteMine, "1"},
		// Before 3.22 the command is the literal 'publish'.
		{"redisson-3.10.0-3.21.3-readlock-release.lua", stateReadMine, "0"},
		{"redisson-3.10.0-3.21.3-writelock-release.lua", stateWriteMine, "1"},
		{"redisson-3.10.0-3.21.3-readlock-forceunlock.lua", stateReadMine, "0"},
	} {
		t.Run(c.file, func(t *testing.T) {
			script := string(readScript(t, c.file))
			var subs []*respConn
			for _, addr := range []string{d.referenceAddr, d.backendAddr} {
				sub := dialRESP(t, addr)
				if _, err := sub.do("PSUBSCRIBE", "c*:ch"); err != nil {
					t.Fatal(err)
				}
				subs = append(subs, sub)
			}
			if _, err := d.run(script, diffCalls[classify([]byte(script)).name][0], c.state); err != nil {
				t.Fatal(err)
			}
			channel := fmt.Sprintf("c%d:ch", d.cases.Load())
			for i, pub := range []*respConn{d.reference, d.backends[0]} {
				if _, err := pub.do("PUBLISH", "c-marker:ch", "marker"); err != nil {
					t.Fatal(err)
				}
				want := encode("pmessage", "c*:ch", channel, c.message)
				if i > 0 {
					want = encode("pmessage", "c*:ch", "c-marker:ch", "marker")
				}
				subs[i].conn.SetDeadline(time.Now().Add(10 * time.Second))
				if got, err := readReply(subs[i].rd); err != nil || got != want {
					t.Errorf("server %d: heard %q (%v), want %q", i, got, err, want)
				}
			}
		})
	}
}
