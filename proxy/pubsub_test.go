package proxy

import (
	"fmt"
	"strings"
	"testing"
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
