package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestWriteTimeout: a client that pipelines commands and never reads a
// reply is closed once the proxy could write it nothing for the write
// timeout, and frees its max_clients slot; one that reads is served.
func TestWriteTimeout(t *testing.T) {
	ts := startServer(t, Config{WriteTimeout: 200 * time.Millisecond, MaxClients: 2})
	stuck, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stuck.Close() })
	stuck.(*net.TCPConn).SetReadBuffer(4096) // its replies back up sooner
	echo := encode("ECHO", strings.Repeat("e", 64<<10))
	written := make(chan error, 1)
	go func() {
		for {
			if _, err := io.WriteString(stuck, echo); err != nil {
				written <- err
				return
			}
		}
	}()
	w := connect(t, ts.addr)
	redistest.Eventually(t, func() string {
		if r := w.do("PING"); r != "+PONG\r\n" {
			t.Fatalf("PING beside the stuck client: %q", r)
		}
		if n := ts.clients.Load(); n != 1 {
			return fmt.Sprintf("%d connections open, want the reading one only", n)
		}
		return ""
	})
	select {
	case <-written: // its writes fail: the proxy closed it
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck client can still write after the proxy counted it closed")
	}
	if r := connect(t, ts.addr).do("PING"); r != "+PONG\r\n" {
		t.Fatalf("a new client in the freed slot: %q", r)
	}
}

func TestWriteTimeoutDefaults(t *testing.T) {
	for _, tc := range []struct {
		idle, write, want time.Duration
	}{
		{0, 0, 10 * time.Second},
		{0, time.Second, time.Second},
		{2 * time.Second, 0, 2 * time.Second},
		{30 * time.Second, 5 * time.Second, 5 * time.Second},
	} {
		s, err := newWithFake(&fakeLocker{}, Config{IdleTimeout: tc.idle, WriteTimeout: tc.write})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.settings().cfg.writeTimeout(); got != tc.want {
			t.Errorf("idle %s, write %s: a reply waits %s, want %s", tc.idle, tc.write, got, tc.want)
		}
	}
	if _, err := newWithFake(&fakeLocker{}, Config{WriteTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "write timeout") {
		t.Errorf("a negative write timeout: %v", err)
	}
}
