//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"
)

// floor is what the bare socket work of a lock cycle costs on this
// machine, whoever does it: one Go goroutine with plain connections and no
// Redis client library, sending PING. A proxy's lock operation is at least
// one round trip with its client and one fan-out to every backend, so its
// CPU per cycle cannot be below 2 × (RoundTripCPU + FanOutCPU) and its
// acquire latency not below RoundTrip + FanOut; what the proxy spends
// above that is its own.
//
// The Kernel figures are the same work on blocking sockets through bare
// system calls: no Go scheduler, no netpoller, what the kernel alone
// charges a process for it, as a C program would pay. They bound any
// implementation, in any language, on this machine.
type floor struct {
	// One PING and its reply on one connection to the first backend.
	RoundTripCPU float64 `json:"round_trip_cpu_us"`
	RoundTrip    float64 `json:"round_trip_p50_us"`
	// A PING written to every backend, then every reply read.
	FanOutCPU float64 `json:"fan_out_cpu_us"`
	FanOut    float64 `json:"fan_out_p50_us"`
	// The bounds above, per lock cycle and per acquisition.
	CycleCPU   float64 `json:"cycle_cpu_us"`
	AcquireP50 float64 `json:"acquire_p50_us"`

	KernelRoundTripCPU float64 `json:"kernel_round_trip_cpu_us"`
	KernelRoundTrip    float64 `json:"kernel_round_trip_p50_us"`
	KernelFanOutCPU    float64 `json:"kernel_fan_out_cpu_us"`
	KernelFanOut       float64 `json:"kernel_fan_out_p50_us"`
	KernelCycleCPU     float64 `json:"kernel_cycle_cpu_us"`
}

// floorSamples is how many round trips and fan-outs each measures: some
// seconds' worth, enough for a steady median.
const floorSamples = 5000

// pingConn is one connection of a floor measurement.
type pingConn interface {
	send() error
	awaitReply() error
}

var pingCommand = []byte("*1\r\n$4\r\nPING\r\n")

func measureFloor(ctx context.Context, backends []string) (*floor, error) {
	f := &floor{}
	goConns, err := dialAll(backends, func(addr string) (pingConn, error) { return dialGo(ctx, addr) })
	if err != nil {
		return nil, err
	}
	f.RoundTripCPU, f.RoundTrip, f.FanOutCPU, f.FanOut, err = measureTrips(goConns)
	if err != nil {
		return nil, err
	}
	f.CycleCPU = 2 * (f.RoundTripCPU + f.FanOutCPU)
	f.AcquireP50 = f.RoundTrip + f.FanOut

	bareConns, err := dialAll(backends, func(addr string) (pingConn, error) { return dialBlocking(addr) })
	if err != nil {
		return nil, err
	}
	f.KernelRoundTripCPU, f.KernelRoundTrip, f.KernelFanOutCPU, f.KernelFanOut, err = measureTrips(bareConns)
	if err != nil {
		return nil, err
	}
	f.KernelCycleCPU = 2 * (f.KernelRoundTripCPU + f.KernelFanOutCPU)
	return f, nil
}

func dialAll(backends []string, dial func(addr string) (pingConn, error)) ([]pingConn, error) {
	conns := make([]pingConn, len(backends))
	for i, addr := range backends {
		c, err := dial(addr)
		if err != nil {
			for _, open := range conns[:i] {
				open.(io.Closer).Close()
			}
			return nil, fmt.Errorf("floor: %w", err)
		}
		conns[i] = c
	}
	return conns, nil
}

// measureTrips closes conns when done.
func measureTrips(conns []pingConn) (tripCPU, trip, fanCPU, fan float64, err error) {
	defer func() {
		for _, c := range conns {
			c.(io.Closer).Close()
		}
	}()
	// sample runs step floorSamples times: its CPU per step and median.
	sample := func(step func() error) (cpu, p50 float64, err error) {
		walls := make([]time.Duration, floorSamples)
		cpu0 := selfCPU()
		for i := range walls {
			start := time.Now()
			if err := step(); err != nil {
				return 0, 0, fmt.Errorf("floor: %w", err)
			}
			walls[i] = time.Since(start)
		}
		cpu = float64((selfCPU() - cpu0).Microseconds()) / floorSamples
		slices.Sort(walls)
		return cpu, float64(walls[len(walls)/2].Nanoseconds()) / 1e3, nil
	}
	if tripCPU, trip, err = sample(func() error {
		if err := conns[0].send(); err != nil {
			return err
		}
		return conns[0].awaitReply()
	}); err != nil {
		return
	}
	fanCPU, fan, err = sample(func() error {
		for _, c := range conns {
			if err := c.send(); err != nil {
				return err
			}
		}
		for _, c := range conns {
			if err := c.awaitReply(); err != nil {
				return err
			}
		}
		return nil
	})
	return
}

// goConn is a net.Conn: Go's netpoller parks the goroutine on a read
// that would block.
type goConn struct {
	net.Conn
	r *bufio.Reader
}

func dialGo(ctx context.Context, addr string) (*goConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &goConn{Conn: c, r: bufio.NewReader(c)}, nil
}

func (c *goConn) send() error {
	_, err := c.Write(pingCommand)
	return err
}

func (c *goConn) awaitReply() error {
	_, err := c.r.ReadSlice('\n')
	return err
}

// blockingConn is a socket in blocking mode, read and written by bare
// system calls: the thread sleeps in read(2) until the reply is in.
type blockingConn struct {
	fd  int
	buf [64]byte
}

func dialBlocking(addr string) (*blockingConn, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	family, sa := syscall.AF_INET6, syscall.Sockaddr(nil)
	if ip4 := ta.IP.To4(); ip4 != nil {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)}
	} else {
		sa = &syscall.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Connect(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &blockingConn{fd: fd}, nil
}

func (c *blockingConn) send() error {
	_, err := syscall.Write(c.fd, pingCommand)
	return err
}

// awaitReply reads until the reply's line ends: "+PONG\r\n" comes in one
// segment in practice, but need not.
func (c *blockingConn) awaitReply() error {
	for {
		n, err := syscall.Read(c.fd, c.buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		if c.buf[n-1] == '\n' {
			return nil
		}
	}
}

func (c *blockingConn) Close() error { return syscall.Close(c.fd) }

func (f *floor) print(out io.Writer, backends int) {
	fmt.Fprintf(out, "\nFloor: the bare socket work of a proxied lock cycle on this machine (one goroutine, plain connections, PING)\n")
	fmt.Fprintf(out, "  one round trip: %.1f µs CPU, p50 %.0f µs; a fan-out to all %d backends: %.1f µs CPU, p50 %.0f µs\n",
		f.RoundTripCPU, f.RoundTrip, backends, f.FanOutCPU, f.FanOut)
	fmt.Fprintf(out, "  so a proxy's lock cycle needs at least %.0f µs of CPU (2 × both) and its acquisition at least %.0f µs (one of each)\n",
		f.CycleCPU, f.AcquireP50)
	fmt.Fprintf(out, "  the kernel's part alone (blocking sockets, bare system calls, no Go scheduler): round trip %.1f µs CPU, p50 %.0f µs; fan-out %.1f µs CPU, p50 %.0f µs\n",
		f.KernelRoundTripCPU, f.KernelRoundTrip, f.KernelFanOutCPU, f.KernelFanOut)
	fmt.Fprintf(out, "  so no proxy in any language can spend less than %.0f µs of CPU per lock cycle here\n", f.KernelCycleCPU)
}
