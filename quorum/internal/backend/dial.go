package backend

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Where names the data set a go-redis URL leads to: the server's
// host:port (or socket path) and the database, "host:port/db". It fails
// on a bad URL, as New does.
func Where(rawURL string) (string, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%d", opt.Addr, opt.DB), nil
}

// options reads a go-redis URL, with tc in place of go-redis's TLS
// settings for a rediss:// URL.
func options(rawURL string, tc *tls.Config) (*redis.Options, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opt.TLSConfig != nil && tc != nil {
		own := tc.Clone()
		if own.ServerName == "" {
			own.ServerName = opt.TLSConfig.ServerName
		}
		own.InsecureSkipVerify = own.InsecureSkipVerify || opt.TLSConfig.InsecureSkipVerify
		opt.TLSConfig = own
	}
	return opt, nil
}

// connect dials the server and greets it, all within one Timeout.
func (pp *Pipe) connect() (net.Conn, *bufio.Reader, error) {
	nc, rw, err := dial(pp.done, pp.opt, pp.timeout, pp.greet)
	if err != nil {
		return nil, nil, err
	}
	return nc, rw.Reader, nil
}

// dial connects to the server opt names and runs greet on the connection,
// all within timeout; done ends it early.
func dial(done context.Context, opt *redis.Options, timeout time.Duration, greet func(*bufio.ReadWriter) error) (net.Conn, *bufio.ReadWriter, error) {
	ctx, cancel := context.WithTimeout(done, timeout)
	defer cancel()
	d := net.Dialer{}
	nc, err := d.DialContext(ctx, opt.Network, opt.Addr)
	if err != nil {
		return nil, nil, err
	}
	// The greeting runs under the connection's deadline; done ends it too.
	unhook := context.AfterFunc(done, func() { nc.Close() })
	defer unhook()
	if opt.TLSConfig != nil {
		tc := tls.Client(nc, opt.TLSConfig.Clone())
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, err
		}
		nc = tc
	}
	deadline, _ := ctx.Deadline()
	nc.SetDeadline(deadline)
	first := &firstBytes{r: nc}
	rw := bufio.NewReadWriter(bufio.NewReaderSize(first, 16<<10), bufio.NewWriter(nc))
	if err := greet(rw); err != nil {
		if len(first.buf) == 0 && IsClosed(err) {
			// A server of another protocol answers the first line it
			// cannot parse and closes, resetting a greeting still being
			// written: the write fails, but its answer is already here.
			rw.Reader.Peek(1)
		}
		nc.Close()
		return nil, nil, notRedis(err, opt.Addr, first.buf)
	}
	nc.SetDeadline(time.Time{})
	return nc, rw, nil
}

// firstBytes keeps the first bytes a server sent, so that a greeting it
// answered in another protocol can show them.
type firstBytes struct {
	r   io.Reader
	buf []byte
}

// firstBytesKept is enough to recognise a protocol: "HTTP/1.1 400 Bad
// Request", "SSH-2.0-OpenSSH_9.2p1".
const firstBytesKept = 32

func (f *firstBytes) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if len(f.buf) < firstBytesKept {
		f.buf = append(f.buf, p[:min(n, firstBytesKept-len(f.buf))]...)
	}
	return n, err
}

// notRedis names a greeting's failure that came from a server speaking
// something other than RESP, which the reply parser would call a "bad
// reply type": a reply that does not parse, or a connection closed after
// bytes that cannot start one. Other failures come back as they are.
func notRedis(err error, addr string, first []byte) error {
	var pe protocolError
	switch {
	case len(first) == 0:
		return err
	case errors.As(err, &pe):
	case IsClosed(err) && !strings.ContainsRune("+-:$*", rune(first[0])):
	default:
		return err
	}
	line, _, _ := strings.Cut(string(first), "\r\n")
	return &NotRedisError{Addr: addr, First: line, Err: err}
}
