package test

import (
	"io"
	"net"
	"sync"
)

// gate is the address lockproxy knows for one faultNet backend: a listener
// held for the whole test, forwarding each connection to the backend's
// toxiproxy proxy, wherever that listens now. It cuts connections and
// refuses new ones itself (drop), so the port never changes hands.
type gate struct {
	ln net.Listener

	mu      sync.Mutex
	target  string // the proxy's address
	dropped bool
	conns   map[net.Conn]bool // both ends of every forwarded connection
	done    bool
}

func newGate(target string) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go g.serve()
	return g, nil
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return // closed
		}
		go g.forward(c)
	}
}

// forward joins c to the proxy until either end closes, then closes both,
// so that a connection the proxy cuts is cut for lockproxy too.
func (g *gate) forward(c net.Conn) {
	g.mu.Lock()
	target, dropped := g.target, g.dropped || g.done
	g.mu.Unlock()
	if dropped {
		reset(c)
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		reset(c)
		return
	}
	g.mu.Lock()
	if g.dropped || g.done || g.target != target {
		// Dropped or redirected while dialling: the connection belongs to
		// the state before.
		g.mu.Unlock()
		up.Close()
		reset(c)
		return
	}
	g.conns[c], g.conns[up] = true, true
	g.mu.Unlock()
	var once sync.Once
	cut := func() {
		once.Do(func() {
			c.Close()
			up.Close()
			g.mu.Lock()
			delete(g.conns, c)
			delete(g.conns, up)
			g.mu.Unlock()
		})
	}
	go func() { _, _ = io.Copy(up, c); cut() }()
	_, _ = io.Copy(c, up)
	cut()
}

// reset closes c with a TCP reset rather than a FIN, as a process that died
// with the connection open would leave it.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// cutAll closes every forwarded connection. Callers hold g.mu.
func (g *gate) cutAll() {
	for c := range g.conns {
		c.Close() // forward's copies return and tidy the map
	}
}

func (g *gate) drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropped = true
	g.cutAll()
}

func (g *gate) restore() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropped = false
}

// redirect sends new connections to the proxy at target and cuts the ones
// open.
func (g *gate) redirect(target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.target = target
	g.cutAll()
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	g.ln.Close()
	g.cutAll()
}
