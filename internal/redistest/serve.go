package redistest

import (
	"net"
	"testing"
)

// Serve listens on a free loopback port and hands each connection to
// handle, in a goroutine of its own, until t ends: a server that is not
// Redis, or not yet (one that never answers, speaks first, or answers as
// HTTP), for the tests of what a client makes of it. handle owns the
// connection. Serve returns the address.
func Serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}
