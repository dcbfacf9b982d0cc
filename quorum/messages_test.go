package quorum

import (
	"testing"
	"time"
)

func TestRelayHeardOnceByEveryEngine(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	listeners := []*Engine{c.engine, newEngine(t, c.cfg)}
	type heard struct{ topic, message string }
	got := make([]chan heard, len(listeners))
	for i, e := range listeners {
		got[i] = make(chan heard, 16)
		stop := e.Relayed("chan:*", func(topic, message string) { got[i] <- heard{topic, message} })
		t.Cleanup(stop)
	}
	// Relayed returned with a quorum of backends carrying the pattern.
	ctx := t.Context()
	for _, m := range []heard{{"other", "x"}, {"chan:1", "a:b"}, {"chan:1", "a:b"}} {
		if err := c.engine.Relay(ctx, m.topic, m.message); err != nil {
			t.Fatal(err)
		}
	}
	for i := range listeners {
		for range 2 { // the same message twice is two messages
			select {
			case h := <-got[i]:
				if h != (heard{"chan:1", "a:b"}) {
					t.Fatalf("engine %d heard %+v", i, h)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("engine %d heard nothing", i)
			}
		}
	}
	// Each message's other copies are not heard again: a last one is next.
	if err := c.engine.Relay(ctx, "chan:2", "last"); err != nil {
		t.Fatal(err)
	}
	for i := range listeners {
		if h := <-got[i]; h != (heard{"chan:2", "last"}) {
			t.Fatalf("engine %d heard %+v, want the last message next", i, h)
		}
	}
}

func TestRelayWithBackendsDown(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	for _, s := range c.servers {
		s.Kill()
	}
	if err := c.engine.Relay(t.Context(), "t", "m"); err != ErrNotRelayed {
		t.Fatalf("Relay with every backend down: %v, want ErrNotRelayed", err)
	}
}
