package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection, the dialled one
// wrapped.
func pair(t *testing.T) (wrapped, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer = <-accepted
	if peer == nil {
		t.FailNow()
	}
	wrapped = Wrap(c)
	if _, ok := wrapped.(*Conn); !ok {
		t.Fatalf("Wrap gave %T, want *Conn", wrapped)
	}
	t.Cleanup(func() { wrapped.Close(); peer.Close() })
	return wrapped, peer
}

func TestReadWrite(t *testing.T) {
	c, peer := pair(t)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "PING\r\n" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	if _, err := peer.Write([]byte("+PONG\r\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 7)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}
}

// A write larger than the socket buffers waits for room, as a net.Conn's
// does, and arrives whole.
func TestWriteWaitsForRoom(t *testing.T) {
	c, peer := pair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		n, err := c.Write(big)
		if err == nil && n != len(big) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(peer, int64(len(big))))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("read %d bytes, not what was written", len(got))
	}
}

func TestEOFAndClosed(t *testing.T) {
	c, peer := pair(t)
	peer.Close()
	if _, err := c.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
	c.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
}

// Deadlines end a parked read with the error a net.Conn gives.
func TestReadDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	if op := err.(*net.OpError).Op; op != "read" {
		t.Fatalf("read past its deadline: operation %q, want \"read\" as a net.Conn names it", op)
	}
}

// A write to a peer that reset the connection fails with the system's
// error rather than hanging or claiming success.
func TestWriteAfterReset(t *testing.T) {
	c, peer := pair(t)
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	var err error
	for range 100 {
		if _, err = c.Write([]byte("x")); err != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("write after reset: %T %v, want a *net.OpError", err, err)
	}
}

func TestWrapLeavesOthersAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("Wrap wrapped a net.Pipe, which has no socket")
	}
}
