//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// measureIdle opens n idle connections to the proxy, each confirmed with
// one PING so the proxy has accepted and served it, and reads the proxy's
// RSS before, while they are open, and after they are closed.
func measureIdle(ctx context.Context, e *env, addr string, n int, m *memory) error {
	runtime.GC()
	settle()
	m.IdleConns = n
	m.RSSBeforeIdle = e.proxyRSS()
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	const dialers = 32
	for d := range dialers {
		wg.Go(func() {
			for i := d; i < n && ctx.Err() == nil; i += dialers {
				c, err := ping(addr)
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("idle connection %d: %w", i, err))
					mu.Unlock()
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.IdleOpenSecond = time.Since(start).Seconds()
	settle()
	m.RSSWithIdle = e.proxyRSS()
	m.BytesPerIdle = float64(m.RSSWithIdle-m.RSSBeforeIdle) / float64(n)
	for i, c := range conns {
		c.Close()
		conns[i] = nil
	}
	settle()
	m.RSSAfterClose = e.proxyRSS()
	return nil
}

// settle gives the proxy a moment to finish accepting or closing; RSS is a
// reading, not a synchronisation, so a pause is what is wanted here.
func settle() { time.Sleep(time.Second) }

// ping dials addr and exchanges one PING.
func ping(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	buf := make([]byte, len("+PONG\r\n"))
	if _, err := io.ReadFull(c, buf); err != nil {
		c.Close()
		return nil, err
	}
	if string(buf) != "+PONG\r\n" {
		c.Close()
		return nil, fmt.Errorf("PING answered %q", buf)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
