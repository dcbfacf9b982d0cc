package proxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// A subscribed connection gets messages at any time, from the engine's
// goroutines, while its own goroutine may be parked reading its next
// command: so from its first SUBSCRIBE on, everything it is sent goes
// through a pushWriter, one goroutine that owns the socket's writes,
// replies and messages alike, in the order they were queued. The queue is
// bounded, as Redis bounds a pub/sub client's output buffer
// (client-output-buffer-limit pubsub 32mb), and each write must be taken
// within the write timeout: a subscriber that stops reading is cut, not
// buffered for ever.

// pushLimit is the most a subscribed connection may have queued and not
// yet written: Redis's hard limit for pub/sub clients.
const pushLimit = 32 << 20

// errPushLimit ends a subscribed connection whose client reads too slowly.
var errPushLimit = errors.New("proxy: subscriber's output beyond 32 MiB")

// pushWriter writes a connection's output from a goroutine of its own.
type pushWriter struct {
	conn    net.Conn
	timeout time.Duration

	mu      sync.Mutex
	queued  []byte
	err     error // the first failure: nothing is written after it
	closing bool
	wake    chan struct{} // has a token when queued or closing changed
	done    chan struct{} // closed when the goroutine has ended
}

func newPushWriter(conn net.Conn, timeout time.Duration) *pushWriter {
	w := &pushWriter{conn: conn, timeout: timeout, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// send queues b (copied) to be written after what was queued before, and
// returns the failure that ended the connection, if any. It never waits
// on the client.
func (w *pushWriter) send(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sendLocked(b)
}

func (w *pushWriter) sendLocked(b []byte) error {
	if w.err != nil || w.closing || len(b) == 0 {
		return w.err
	}
	if len(w.queued)+len(b) > pushLimit {
		w.err = errPushLimit
		w.conn.Close() // the reader ends too
		return w.err
	}
	w.queued = append(w.queued, b...)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// run writes what is queued until close, or a failure.
func (w *pushWriter) run() {
	defer close(w.done)
	var out []byte
	for {
		<-w.wake
		w.mu.Lock()
		out, w.queued = w.queued, out[:0]
		closing, err := w.closing, w.err
		w.mu.Unlock()
		if err != nil {
			return
		}
		for b := out; len(b) > 0; {
			// Each chunk gets the whole timeout, as client.flush gives it.
			w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
			n, err := w.conn.Write(b[:min(len(b), writeChunk)])
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				w.conn.Close()
				return
			}
			b = b[n:]
		}
		if cap(out) > replyKeep {
			out = nil
		}
		w.mu.Lock()
		drained := len(w.queued) == 0
		w.mu.Unlock()
		if closing && drained {
			return
		}
	}
}

// close writes what is queued (each chunk within the write timeout), then
// ends the goroutine; nothing queued after it is written. It returns the
// failure that ended the connection, if any.
func (w *pushWriter) close() error {
	w.mu.Lock()
	w.closing = true
	select {
	case w.wake <- struct{}{}:
	default:
	}
	w.mu.Unlock()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
