package proxy

import (
	"bufio"
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

// hashKinds are Redisson's kinds, each with how many of its first keys
// are locks (0: all of them); its other keys (channel, latch) start absent.
var hashKinds = map[string]int{
	"redisson-acquire": 1, "redisson-release-latched": 1, "redisson-release": 1, "redisson-release-command": 1,
	"redisson-force-unlock": 1, "redisson-force-unlock-command": 1, "redisson-renew": 1, "redisson-renew-batch": 0,
}

// attemptField starts the engine's record of an acquisition attempt in a
// hash lock.
const attemptField = "\x00attempt:"

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
}

// pttlKinds reply with a PTTL (or hold one in their reply).
var pttlKinds = map[string]bool{"owner-pttl": true, "owner-pttl-or-zero": true, "value-and-pttl": true, "multi-owner-pttl": true, "redisson-acquire": true}

// signalKinds name a signal list in KEYS[2] that lockproxy does not write:
// neither side's KEYS[2] is compared.
var signalKinds = map[string]bool{"compare-and-delete-and-signal": true, "delete-and-signal": true}

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
	cases                    atomic.Int64 // unique key prefixes
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
	d := &differential{proxy: dialRESP(t, addr), reference: dialRESP(t, servers[3].Addr()), proxyAddr: addr, referenceAddr: servers[3].Addr()}
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
		keys[i] = prefix + k
	}
	kind := classify([]byte(script))
	stated := keys
	if kind != nil {
		if n, ok := hashKinds[kind.name]; ok && n > 0 {
			stated = keys[:min(n, len(keys))]
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
	wrongType := hashKind && strings.HasPrefix(rawRef, "-WRONGTYPE")
	if why := sameReply(parseRESP(raw), parseRESP(rawRef), tolerance); why != "" && !wrongType {
		return false, fmt.Errorf("as %s: reply %q, Redis %q: %s", kind.name, raw, rawRef, why)
	}
	ref, err := keysOf(d.reference, prefix)
	if err != nil {
		return false, err
	}
	unsignalled := func(views map[string]keyView) map[string]keyView {
		if signalKinds[kind.name] {
			delete(views, keys[1])
		}
		return views
	}
	ref = unsignalled(ref)
	refAt := time.Now()
	// The last backend's write may land after the quorum's answer, and a
	// rollback after it: wait for the backends to settle. Their TTLs are
	// compared with the reference's as it would be at the same instant, so
	// that waiting cannot make a longer TTL look right.
	deadline := time.Now().Add(3 * time.Second)
	for i, b := range d.backends {
		for {
			got, err := keysOf(b, prefix)
			if err != nil {
				return false, err
			}
			why := sameKeys(unsignalled(got), ref, time.Since(refAt))
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

// keysOf returns every key of the server but those of other cases.
func keysOf(c *respConn, prefix string) (map[string]keyView, error) {
	raw, err := c.do("KEYS", "*")
	if err != nil {
		return nil, err
	}
	views := map[string]keyView{}
	for _, k := range parseRESP(raw).array {
		name := k.str
		if strings.HasPrefix(name, "c") && strings.Contains(name, ":") && !strings.HasPrefix(name, prefix) {
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
// engine's records of attempts.
func hashView(pairs []parsedReply) string {
	var fields []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.HasPrefix(pairs[i].str, attemptField) {
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
		if _, ok := hashKinds[kind.name]; ok {
			states = hashStates
		}
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
	tried := map[string]bool{}
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		for _, call := range diffCalls[s.kind] {
			for _, state := range diffStates {
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
