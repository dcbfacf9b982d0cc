package backend

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
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
	rw := bufio.NewReadWriter(bufio.NewReaderSize(nc, 16<<10), bufio.NewWriter(nc))
	if err := greet(rw); err != nil {
		nc.Close()
		return nil, nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, rw, nil
}
