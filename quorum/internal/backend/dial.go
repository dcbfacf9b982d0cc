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
	ctx, cancel := context.WithTimeout(pp.done, pp.timeout)
	defer cancel()
	d := net.Dialer{}
	nc, err := d.DialContext(ctx, pp.opt.Network, pp.opt.Addr)
	if err != nil {
		return nil, nil, err
	}
	// The greeting runs under the connection's deadline; closing the Pipe
	// ends it too.
	unhook := context.AfterFunc(pp.done, func() { nc.Close() })
	defer unhook()
	if pp.opt.TLSConfig != nil {
		tc := tls.Client(nc, pp.opt.TLSConfig.Clone())
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, err
		}
		nc = tc
	}
	deadline, _ := ctx.Deadline()
	nc.SetDeadline(deadline)
	rw := bufio.NewReadWriter(bufio.NewReaderSize(nc, 16<<10), bufio.NewWriter(nc))
	if err := pp.greet(rw); err != nil {
		nc.Close()
		return nil, nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, rw.Reader, nil
}
