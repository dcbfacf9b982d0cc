package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// acquisition is one SET NX PX a drain test client sent, and its outcome.
type acquisition struct {
	key, token string
	reply      string    // "OK", "nil" or the error text
	sent, done time.Time // around the command
}

// acquirers are clients that each take fresh keys one after another, on
// their own connection, until the proxy stops answering.
type acquirers struct {
	wg      sync.WaitGroup
	pending []atomic.Int64 // per client: when its outstanding command was sent (unix ns), 0 when none
	mu      sync.Mutex
	all     []acquisition
}

func startAcquirers(addr string, clients int) *acquirers {
	as := &acquirers{pending: make([]atomic.Int64, clients)}
	for i := range clients {
		as.wg.Go(func() {
			cli := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1,
				ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
			defer cli.Close()
			for j := 0; ; j++ {
				a := acquisition{key: fmt.Sprintf("drain:%d:%d", i, j), token: fmt.Sprintf("t%d.%d", i, j), sent: time.Now()}
				as.pending[i].Store(a.sent.UnixNano())
				err := cli.SetArgs(context.Background(), a.key, a.token, redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err()
				a.done = time.Now()
				as.pending[i].Store(0)
				switch {
				case err == nil:
					a.reply = "OK"
				case errors.Is(err, redis.Nil):
					a.reply = "nil"
				default:
					a.reply = err.Error()
				}
				as.mu.Lock()
				as.all = append(as.all, a)
				as.mu.Unlock()
				if err != nil && !errors.Is(err, redis.Nil) {
					return // shutting down, refused or closed
				}
			}
		})
	}
	return as
}

// stuck counts the clients whose outstanding command was sent over d ago.
func (as *acquirers) stuck(d time.Duration) int {
	n := 0
	for i := range as.pending {
		if p := as.pending[i].Load(); p != 0 && time.Since(time.Unix(0, p)) > d {
			n++
		}
	}
	return n
}

// ok counts the acquisitions answered OK so far.
func (as *acquirers) ok() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	n := 0
	for _, a := range as.all {
		if a.reply == "OK" {
			n++
		}
	}
	return n
}

// wait returns every acquisition once all clients stopped.
func (as *acquirers) wait() []acquisition {
	as.wg.Wait()
	return as.all
}

// checkHeld fails the test for every acquisition answered OK that is not
// held with its token on a quorum of the backends.
func checkHeld(t *testing.T, c *cluster, all []acquisition) (ok int) {
	t.Helper()
	quorum := len(c.servers)/2 + 1
	for _, a := range all {
		if a.reply != "OK" {
			continue
		}
		ok++
		n := 0
		for _, v := range c.held(t, a.key) {
			if v == a.token {
				n++
			}
		}
		if n < quorum {
			t.Errorf("%s was answered OK but is held by %d of %d backends", a.key, n, len(c.servers))
		}
	}
	return ok
}

// TestDrainAcquisitions: many clients acquire through the proxy while it
// gets SIGTERM. The acquisitions in flight at that moment (stuck on two
// paused backends) finish with their real answer once the backends resume;
// new connections are refused meanwhile; every OK any client got is held
// on a quorum; the process exits 0 within the shutdown timeout.
func TestDrainAcquisitions(t *testing.T) {
	proxyTest(t)
	const shutdownTimeout = 10 * time.Second
	c := newCluster(t, 3, "-backend-timeout", "5s", "-shutdown-timeout", shutdownTimeout.String())
	as, term := termWithAcquisitionsInFlight(t, c, 16, 200)
	// Refused while draining: the listener is closed at once, and the
	// process is still waiting for its commands in flight.
	redistest.Eventually(t, func() string {
		conn, err := net.DialTimeout("tcp", c.proxy.Addr, time.Second)
		if err == nil {
			conn.Close()
			return "a new connection was accepted after SIGTERM"
		}
		return ""
	})
	select {
	case <-c.proxy.done:
		t.Fatal("the proxy exited with acquisitions in flight")
	default:
	}
	c.servers[0].Resume()
	c.servers[1].Resume()

	select {
	case <-c.proxy.done:
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("the proxy did not exit within %s of SIGTERM", shutdownTimeout)
	}
	if took := time.Since(term); took > shutdownTimeout+2*time.Second {
		t.Errorf("the proxy took %s to exit after SIGTERM, shutdown timeout %s", took, shutdownTimeout)
	}
	if code := c.proxy.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM:\n%s", code, c.proxy.Log())
	}
	all := as.wait()
	ok := checkHeld(t, c, all)
	drained := 0
	for _, a := range all {
		if a.reply == "OK" && a.sent.Before(term) && a.done.After(term) {
			drained++
		}
	}
	t.Logf("%d acquisitions, %d OK, of which %d were in flight at SIGTERM", len(all), ok, drained)
	if drained == 0 {
		t.Error("no acquisition in flight at SIGTERM finished with OK: the drain did not wait for them")
	}
}

// TestDrainDeadline: when the commands in flight outlast the shutdown
// timeout, the proxy exits anyway, and none of them is answered OK. The
// bound on the exit leaves room for the backend timeout.
func TestDrainDeadline(t *testing.T) {
	proxyTest(t)
	const shutdownTimeout, backendTimeout = time.Second, 5 * time.Second
	c := newCluster(t, 3, "-backend-timeout", backendTimeout.String(), "-shutdown-timeout", shutdownTimeout.String())
	as, term := termWithAcquisitionsInFlight(t, c, 8, 50)
	select {
	case <-c.proxy.done:
	case <-time.After(shutdownTimeout + backendTimeout + 5*time.Second):
		t.Fatalf("the proxy did not exit within %s of SIGTERM", shutdownTimeout+backendTimeout)
	}
	took := time.Since(term)
	t.Logf("exited %s after SIGTERM with code %d", took.Round(time.Millisecond), c.proxy.cmd.ProcessState.ExitCode())
	if took < shutdownTimeout {
		t.Errorf("exited %s after SIGTERM, before the shutdown timeout %s, with commands in flight", took, shutdownTimeout)
	}
	all := as.wait()
	cut := 0
	for _, a := range all {
		if a.done.After(term) {
			cut++
			if cut == 1 {
				t.Logf("an acquisition cut off got %q", a.reply)
			}
			if a.reply == "OK" {
				t.Errorf("%s was answered OK with two of three backends paused", a.key)
			}
		}
	}
	if cut < 8 {
		t.Errorf("%d acquisitions were in flight at SIGTERM, want 8", cut)
	}
	// The backends resume: every OK before the pause is still held on a
	// quorum; none of those cut off was reported as taken.
	c.servers[0].Resume()
	c.servers[1].Resume()
	checkHeld(t, c, all)
}

// termWithAcquisitionsInFlight starts clients acquiring through c's proxy,
// lets them take warm locks, then pauses two of the three backends so that
// every client's next acquisition stays in flight, and sends the proxy
// SIGTERM. The backends resume when the test ends, if not before.
func termWithAcquisitionsInFlight(t *testing.T, c *cluster, clients, warm int) (*acquirers, time.Time) {
	t.Helper()
	as := startAcquirers(c.proxy.Addr, clients)
	redistest.Eventually(t, func() string {
		if n := as.ok(); n < warm {
			return fmt.Sprintf("only %d locks taken", n)
		}
		return ""
	})
	c.servers[0].Pause()
	c.servers[1].Pause()
	t.Cleanup(c.servers[0].Resume)
	t.Cleanup(c.servers[1].Resume)
	redistest.Eventually(t, func() string {
		if n := as.stuck(100 * time.Millisecond); n < clients {
			return fmt.Sprintf("only %d of %d clients wait for an acquisition", n, clients)
		}
		return ""
	})
	term := time.Now()
	if err := c.proxy.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return as, term
}
