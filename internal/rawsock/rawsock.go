// Package rawsock reads and writes sockets without telling the Go
// scheduler that a system call is under way.
//
// A net.Conn's Read and Write enter the runtime's syscall state, and the
// first such entry after the whole process was idle wakes the runtime's
// monitor thread (sysmon), which then polls every 20 µs until the process
// is idle again. A proxy serving one lock at a time goes idle and wakes
// several times per lock operation, so that monitor's wake-ups cost it
// about a tenth of its CPU. The sockets are non-blocking, so their reads
// and writes return at once, and a raw system call is what they need:
// the netpoller still parks the goroutine when there is nothing to read or
// no room to write, and deadlines still apply.
package rawsock

import (
	"io"
	"net"
	"os"
	"syscall"
)

// Conn is a net.Conn whose Read and Write are raw system calls.
type Conn struct {
	net.Conn
	raw syscall.RawConn
}

// Wrap returns c with raw reads and writes, or c itself when it is not a
// socket of the operating system's.
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{Conn: c, raw: raw}
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			r, e := sysRead(fd, p)
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = r, e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, renamed(err, "read")
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) Write(p []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for written < len(p) {
			r, e := sysWrite(fd, p[written:])
			switch e {
			case 0:
				written += r
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return written, renamed(err, "write")
	case errno != 0:
		return written, c.opError("write", errno)
	}
	return written, nil
}

// opError is the error a net.Conn's op would give for errno.
func (c *Conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// renamed gives a RawConn's error ("raw-read tcp ...: i/o timeout") the
// operation a net.Conn's would name.
func renamed(err error, op string) error {
	if oe, ok := err.(*net.OpError); ok {
		named := *oe
		named.Op = op
		return &named
	}
	return err
}
