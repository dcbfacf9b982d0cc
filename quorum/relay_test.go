package quorum

import (
	"io"
	"net"
	"sync"
	"testing"
)

// relay is a TCP relay that stands for a backend address whose server can
// change, as a DNS name or a virtual IP can: it forwards each connection to
// its target of the moment, or holds it open without a word (a hung host),
// or closes it at once (a host that is down).
type relay struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string // host:port; silent or dropping when empty
	drop   bool
	gen    int // counts changes of target: older connections are cut
	conns  map[net.Conn]struct{}
	dials  map[string]int // connections forwarded, by target
	silent int            // connections held open without a word
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}, dials: map[string]int{}}
	r.wg.Go(r.accept)
	t.Cleanup(func() {
		ln.Close()
		r.cut()
		r.wg.Wait()
	})
	return r
}

func (r *relay) URL() string { return "redis://" + r.ln.Addr().String() }

// forwarded returns how many connections the relay has forwarded to target.
func (r *relay) forwarded(target string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dials[target]
}

// held returns how many connections the relay has held open without
// answering: dials whose greeting waits.
func (r *relay) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.silent
}

// to forwards new connections to target and cuts the current ones, so that
// clients reconnect to it.
func (r *relay) to(target string) { r.set(target, false) }

// silence holds new connections open without answering, and cuts the
// current ones.
func (r *relay) silence() { r.set("", false) }

// down closes new connections at once, and cuts the current ones.
func (r *relay) down() { r.set("", true) }

func (r *relay) set(target string, drop bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target, r.drop = target, drop
	r.gen++
	for c := range r.conns {
		c.Close()
	}
}

func (r *relay) cut() { r.set("", true) }

// track registers c, accepted under generation gen; it closes c and
// reports false when the target has changed since.
func (r *relay) track(c net.Conn, gen int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) forget(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(r.conns, c)
	}
}

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target, drop, gen := r.target, r.drop, r.gen
		r.mu.Unlock()
		switch {
		case drop:
			c.Close()
		case target == "":
			if r.track(c, gen) { // held until cut
				r.mu.Lock()
				r.silent++
				r.mu.Unlock()
			}
		default:
			r.wg.Go(func() { r.forward(c, target, gen) })
		}
	}
}

func (r *relay) forward(c net.Conn, target string, gen int) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	if !r.track(c, gen) || !r.track(up, gen) {
		r.forget(c, up)
		return
	}
	r.mu.Lock()
	r.dials[target]++
	r.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { io.Copy(up, c); r.forget(c, up) })
	both.Go(func() { io.Copy(c, up); r.forget(c, up) })
	both.Wait()
}
