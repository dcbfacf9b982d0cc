package proxy

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestPipelineRunsAtOnce: lock commands pipelined on different keys run at
// once, and their replies come back in the order sent. Each call here
// waits until every one of them has started, which only concurrent
// handling can satisfy.
func TestPipelineRunsAtOnce(t *testing.T) {
	ts := startServer(t, Config{})
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	ts.fake.reset(func(c call) (any, error) {
		started.Done()
		select {
		case <-allStarted:
		case <-time.After(5 * time.Second):
			return nil, errors.New("ran alone")
		}
		if c.op == "get" {
			return "value-of-" + c.key, nil
		}
		return nil, nil
	})
	w := connect(t, ts.addr)
	var batch strings.Builder
	for i := range n {
		if i%2 == 0 {
			batch.WriteString(encode("SET", fmt.Sprintf("k%d", i), "tok", "NX", "PX", "1000"))
		} else {
			batch.WriteString(encode("GET", fmt.Sprintf("k%d", i)))
		}
	}
	w.sendRaw(batch.String())
	for i := range n {
		want := "+OK\r\n"
		if i%2 == 1 {
			v := fmt.Sprintf("value-of-k%d", i)
			want = fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		}
		if got := w.read(); got != want {
			t.Fatalf("reply %d: got %q, want %q", i, got, want)
		}
	}
}

// TestPipelineKeepsOrderOnOneKey: commands on the same key, or that change
// the connection, run in the order sent.
func TestPipelineKeepsOrderOnOneKey(t *testing.T) {
	ts := startServer(t, Config{})
	var mu sync.Mutex
	running := 0
	overlapped := false
	ts.fake.reset(func(c call) (any, error) {
		mu.Lock()
		running++
		overlapped = overlapped || running > 1
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a window for an overlap to show
		mu.Lock()
		running--
		mu.Unlock()
		if c.op == "get" {
			return nil, quorum.ErrNotFound
		}
		return nil, nil
	})
	w := connect(t, ts.addr)
	w.sendRaw(encode("SET", "k", "a", "NX", "PX", "1000") +
		encode("SET", "k", "b", "NX", "PX", "1000") +
		encode("DEL", "x", "k") +
		encode("HELLO", "3") +
		encode("GET", "k"))
	for i, want := range []string{"+OK\r\n", "+OK\r\n", ":0\r\n"} {
		if got := w.read(); got != want {
			t.Fatalf("reply %d: got %q, want %q", i, got, want)
		}
	}
	if got := w.read(); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3: got %q", got)
	}
	if got := w.read(); got != "_\r\n" {
		t.Fatalf("GET after HELLO 3: got %q, want the RESP3 null", got)
	}
	if overlapped {
		t.Fatal("commands on one key ran at once")
	}
	if exp, got := []string{"acquire k a 1s", "acquire k b 1s", "delete x", "delete k", "get k"}, ts.fake.seen(); fmt.Sprint(exp) != fmt.Sprint(got) {
		t.Fatalf("calls: want %v, got %v", exp, got)
	}
}
