package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// pubsubStep is a command and how many frames it answers with.
type pubsubStep struct {
	args   []string
	frames int
}

// pubsubSteps walk through subscribed mode with Spring unlock channels,
// which the proxy serves and a plain Redis takes like any other.
var pubsubSteps = []pubsubStep{
	{[]string{"UNSUBSCRIBE"}, 1},
	{[]string{"PUNSUBSCRIBE"}, 1},
	{[]string{"UNSUBSCRIBE", "reg-channel:reg:a"}, 1},
	{[]string{"PUNSUBSCRIBE", "reg-channel:*", "reg2-channel:*"}, 2},
	{[]string{"SUBSCRIBE", "reg-channel:reg:a", "reg-channel:reg:b"}, 2},
	{[]string{"subscribe", "reg-channel:reg:a"}, 1},
	{[]string{"PSUBSCRIBE", "reg-channel:*"}, 1},
	{[]string{"PING"}, 1},
	{[]string{"PING", "hello"}, 1},
	{[]string{"PING", "a", "b"}, 1},
	{[]string{"GET", "x"}, 1},
	{[]string{"CLIENT", "GETNAME"}, 1},
	{[]string{"NOSUCH"}, 1},
	{[]string{"SUBSCRIBE"}, 1},
	{[]string{"UNSUBSCRIBE", "reg-channel:reg:b", "reg-channel:reg:zzz"}, 2},
	{[]string{"PUNSUBSCRIBE"}, 1},
	{[]string{"PUNSUBSCRIBE"}, 1},
	{[]string{"UNSUBSCRIBE"}, 1},
	{[]string{"PING"}, 1},
	{[]string{"SUBSCRIBE", "reg-channel:reg:a"}, 1},
	{[]string{"PSUBSCRIBE", "reg-channel:*"}, 1},
	{[]string{"RESET"}, 1},
	{[]string{"PING"}, 1},
	{[]string{"UNSUBSCRIBE"}, 1},
	{[]string{"PSUBSCRIBE", "reg-channel:*"}, 1},
	{[]string{"QUIT"}, 1},
}

// TestPubsubDifferential sends the same subscribed-mode conversation to the
// proxy and to a real redis-server, in RESP2 and RESP3, and compares their
// replies byte for byte.
func TestPubsubDifferential(t *testing.T) {
	d := startDifferential(t)
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			got := pubsubConversation(t, d.proxyAddr, proto)
			want := pubsubConversation(t, d.referenceAddr, proto)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("%q:\n got %q\nwant %q", pubsubSteps[i].args, got[i], want[i])
				}
			}
		})
	}
}

// pubsubConversation runs pubsubSteps on a new connection to addr, after
// HELLO proto, and returns each step's frames.
func pubsubConversation(t *testing.T, addr, proto string) []string {
	t.Helper()
	c := dialRESP(t, addr)
	if _, err := c.do("HELLO", proto); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, step := range pubsubSteps {
		raw, err := c.doFrames(step.frames, step.args...)
		if err != nil {
			t.Fatalf("%q: %v (so far %q)", step.args, err, raw)
		}
		out = append(out, raw)
	}
	return out
}

// doFrames sends args and reads n frames.
func (c *respConn) doFrames(n int, args ...string) (string, error) {
	raw, err := c.do(args...)
	for i := 1; i < n && err == nil; i++ {
		var more string
		more, err = readReply(c.rd)
		raw += more
	}
	return raw, err
}

// TestPubsubPublishDifferential has a client PUBLISH to an unlock channel
// that another client follows by channel and by pattern, on the proxy and
// on a real redis-server: the same reply (the receivers) and the same
// message and pmessage, in RESP2 and RESP3.
func TestPubsubPublishDifferential(t *testing.T) {
	d := startDifferential(t)
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			var got [2]string
			for i, addr := range []string{d.proxyAddr, d.referenceAddr} {
				sub, pub := dialRESP(t, addr), dialRESP(t, addr)
				if _, err := sub.do("HELLO", proto); err != nil {
					t.Fatal(err)
				}
				if _, err := sub.doFrames(1, "SUBSCRIBE", "reg-channel:reg:p"); err != nil {
					t.Fatal(err)
				}
				if _, err := sub.doFrames(1, "PSUBSCRIBE", "reg-channel:*"); err != nil {
					t.Fatal(err)
				}
				n, err := pub.do("PUBLISH", "reg-channel:reg:p", "reg:p")
				if err != nil {
					t.Fatal(err)
				}
				msgs, err := readFrames(sub, 2)
				if err != nil {
					t.Fatal(err)
				}
				got[i] = n + msgs
			}
			if got[0] != got[1] {
				t.Errorf("proxy:\n%q\nredis-server:\n%q", got[0], got[1])
			}
		})
	}
}

func readFrames(c *respConn, n int) (string, error) {
	var out strings.Builder
	for range n {
		f, err := readReply(c.rd)
		out.WriteString(f)
		if err != nil {
			return out.String(), fmt.Errorf("after %q: %w", out.String(), err)
		}
	}
	return out.String(), nil
}

// pubsubPair is two proxies, each on its own engine, over the same three
// redis-servers: as two lockproxy instances in front of one backend set.
type pubsubPair struct {
	addrs   [2]string
	engines [2]*quorum.Engine
}

func startPubsubPair(t *testing.T, cfg Config) *pubsubPair {
	t.Helper()
	var urls []string
	for _, s := range redistest.StartN(t, 3) {
		urls = append(urls, s.URL())
	}
	p := &pubsubPair{}
	for i := range p.addrs {
		p.addrs[i], p.engines[i] = serveEngine(t, quorum.Config{Backends: urls, NodeTimeout: time.Second, DisableRestartQuarantine: true}, cfg)
	}
	return p
}

// expectFrame reads the next frame of c and fails unless it is want.
func expectFrame(t *testing.T, c *respConn, want string) {
	t.Helper()
	got, err := readReply(c.rd)
	if err != nil || got != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}

func pushFrame(kind string, parts ...string) string {
	s := fmt.Sprintf(">%d\r\n", len(parts)+1) + fmt.Sprintf("$%d\r\n%s\r\n", len(kind), kind)
	for _, p := range parts {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(p), p)
	}
	return s
}

// TestPubsubReleaseThroughOtherProxy: a Spring unlock through proxy B is
// told once to a subscriber of proxy A, by channel (message) and by
// pattern (pmessage), in Spring's words; a delete is told too; a release
// of another registry's key is not.
func TestPubsubReleaseThroughOtherProxy(t *testing.T) {
	p := startPubsubPair(t, Config{})
	sub := dialRESP(t, p.addrs[0])
	sub.do("HELLO", "3")
	if _, err := sub.doFrames(1, "SUBSCRIBE", "reg-channel:reg:a"); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.doFrames(1, "PSUBSCRIBE", "reg-channel:*"); err != nil {
		t.Fatal(err)
	}
	b := dialRESP(t, p.addrs[1])
	for _, key := range []string{"other:a", "reg:a"} {
		if got, _ := b.do("SET", key, "id", "NX", "PX", "60000"); got != "+OK\r\n" {
			t.Fatalf("SET %s: %q", key, got)
		}
	}
	springUnlock := string(readScript(t, "spring-integration-7.1.1-pubsub-unlock.lua"))
	for _, key := range []string{"other:a", "reg:a"} {
		if got, _ := b.do("EVAL", springUnlock, "1", key, "id", "reg-channel:"+key); got != ":1\r\n" {
			t.Fatalf("Spring's unlock of %s through B: %q", key, got)
		}
	}
	// One each, in either order: the channel and the pattern hear the
	// release apart.
	want := map[string]bool{
		pushFrame("message", "reg-channel:reg:a", "reg:a"):                   true,
		pushFrame("pmessage", "reg-channel:*", "reg-channel:reg:a", "reg:a"): true,
	}
	for range 2 {
		got, err := readReply(sub.rd)
		if err != nil || !want[got] {
			t.Fatalf("got %q (%v), want one of %v", got, err, want)
		}
		delete(want, got)
	}
	// The release's other copies, and other:a's release, told nothing: the
	// delete of reg:b is what comes next.
	b.do("SET", "reg:b", "id", "NX", "PX", "60000")
	if got, _ := b.do("DEL", "reg:b"); got != ":1\r\n" {
		t.Fatalf("DEL reg:b: %q", got)
	}
	expectFrame(t, sub, pushFrame("pmessage", "reg-channel:*", "reg-channel:reg:b", "reg:b"))
}

// TestPubsubPublishAcrossProxies: a client's PUBLISH to an unlock channel
// through proxy A reaches A's subscribers at once (the reply counts them)
// and B's through the backends, once each.
func TestPubsubPublishAcrossProxies(t *testing.T) {
	p := startPubsubPair(t, Config{})
	var subs [2]*respConn
	for i, addr := range p.addrs {
		subs[i] = dialRESP(t, addr)
		if _, err := subs[i].doFrames(1, "SUBSCRIBE", "reg-channel:reg:x"); err != nil {
			t.Fatal(err)
		}
	}
	pub := dialRESP(t, p.addrs[0])
	for _, payload := range []string{"one", "two"} {
		if got, _ := pub.do("PUBLISH", "reg-channel:reg:x", payload); got != ":1\r\n" {
			t.Fatalf("PUBLISH: %q, want the one subscriber of this proxy", got)
		}
	}
	for i := range subs {
		for _, payload := range []string{"one", "two"} {
			expectFrame(t, subs[i], "*3\r\n$7\r\nmessage\r\n$17\r\nreg-channel:reg:x\r\n$"+strconv.Itoa(len(payload))+"\r\n"+payload+"\r\n")
		}
	}
	// Nothing more: a PING's pong is next on both.
	for i := range subs {
		if got, _ := subs[i].do("PING"); got != "*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
			t.Fatalf("proxy %d: after the two messages, %q", i, got)
		}
	}
}

// TestPubsubRefusesOtherChannels: channels that no served library unlocks
// on are refused, and the connection lives.
func TestPubsubRefusesOtherChannels(t *testing.T) {
	p := startPubsubPair(t, Config{})
	c := dialRESP(t, p.addrs[0])
	for _, cmd := range [][]string{
		{"SUBSCRIBE", "news"},
		{"SUBSCRIBE", "reg-channel:reg:a", "news"},
		{"PSUBSCRIBE", "*"},
		{"PSUBSCRIBE", "re*-channel:*"},
		{"SUBSCRIBE", "reg-channel:other:a"},
		{"PUBLISH", "news", "hi"},
	} {
		got, err := c.do(cmd...)
		if err != nil || !strings.HasPrefix(got, "-ERR lockproxy serves ") {
			t.Errorf("%q: %q (%v), want a refusal naming what is served", cmd, got, err)
		}
	}
	if got, _ := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("after the refusals, not subscribed: PING %q", got)
	}
}

// TestPubsubTenantsApart: a user with a key prefix hears the releases of
// its own keys, named without the prefix, and not another user's.
func TestPubsubTenantsApart(t *testing.T) {
	p := startPubsubPair(t, Config{Users: []User{
		{Name: "a", PasswordSHA256: "9513229d435978263d82902c59d4e0fb86c941a9bf09b605cd8a6643f40149a8", KeyPrefix: "ta:"}, // pa
		{Name: "b", PasswordSHA256: "3315f44da4a7aaaf8d84382c7583233f697787f5871294ed49cd41207f7375a0", KeyPrefix: "tb:"}, // pb
	}})
	sub := dialRESP(t, p.addrs[0])
	sub.do("AUTH", "a", "pa")
	if _, err := sub.doFrames(1, "PSUBSCRIBE", "reg-channel:*"); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"b", "a"} {
		c := dialRESP(t, p.addrs[1])
		c.do("AUTH", user, "p"+user)
		c.do("SET", "reg:k", "id", "NX", "PX", "60000")
		if got, _ := c.do("DEL", "reg:k"); got != ":1\r\n" {
			t.Fatalf("%s: DEL %q", user, got)
		}
		if got, _ := c.do("PUBLISH", "reg-channel:reg:p", user); got != ":0\r\n" {
			t.Fatalf("%s: PUBLISH %q", user, got)
		}
	}
	// a's release and a's message, in either order: a release is told once
	// every backend carried it, a message at its first copy.
	want := []string{
		"*4\r\n$8\r\npmessage\r\n$13\r\nreg-channel:*\r\n$17\r\nreg-channel:reg:k\r\n$5\r\nreg:k\r\n",
		"*4\r\n$8\r\npmessage\r\n$13\r\nreg-channel:*\r\n$17\r\nreg-channel:reg:p\r\n$1\r\na\r\n",
	}
	var got []string
	for range want {
		frame, err := readReply(sub.rd)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, frame)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("heard %q, want %q", got, want)
	}
	if got, _ := sub.do("PING"); got != "*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
		t.Fatalf("after the two messages, %q: b's were heard", got)
	}
}
