package quorum

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// TestPipeManyInFlight: concurrent operations share each backend's
// connection, and every one gets its own reply.
func TestPipeManyInFlight(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	const workers, rounds = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			key, token := uniqueKey(t), fmt.Sprintf("token-%d", w)
			for range rounds {
				if _, err := c.engine.acquire(t.Context(), key, token, 10*time.Second); err != nil {
					errs <- fmt.Errorf("acquire: %w", err)
					return
				}
				if got, err := c.engine.get(t.Context(), key); err != nil || got != token {
					errs <- fmt.Errorf("GET %s: %q, %v; want %q", key, got, err, token)
					return
				}
				if _, err := c.engine.release(t.Context(), key, token); err != nil {
					errs <- fmt.Errorf("release: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPipeNoScript: a backend whose script cache was flushed answers
// NOSCRIPT, and the engine sends the script's source instead.
func TestPipeNoScript(t *testing.T) {
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true})
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", time.Second); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := c.direct[0].ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "tok", time.Second); err != nil {
		t.Fatalf("acquire after SCRIPT FLUSH: %v", err)
	}
	if got := c.values(t, key)[0]; got != "tok" {
		t.Fatalf("backend holds %q, want tok", got)
	}
}

// TestPipeRedialsAfterRestart: a backend that restarted closed our
// connection; the next request dials a new one.
func TestPipeRedialsAfterRestart(t *testing.T) {
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true})
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", time.Second); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	c.servers[0].Restart()
	redistest.Eventually(t, func() string {
		if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", time.Second); err != nil {
			return err.Error()
		}
		return ""
	})
}

// TestPipeCutsStalledConnection: a backend that stops answering holds up
// nothing for longer than its timeout, and once it answers again, the
// engine is back without a restart.
func TestPipeCutsStalledConnection(t *testing.T) {
	const timeout = 100 * time.Millisecond
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true, NodeTimeout: timeout})
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", time.Second); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	c.servers[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			c.servers[0].Resume()
		}
	}()
	for range 3 {
		start := time.Now()
		_, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", time.Second)
		if !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("acquire on a paused backend: %v", err)
		}
		// Upper bound only, and generous: the answer comes at the timeout,
		// not whenever the backend resumes.
		if elapsed := time.Since(start); elapsed > 20*timeout {
			t.Fatalf("acquire on a paused backend took %s", elapsed)
		}
	}
	c.servers[0].Resume()
	resumed = true
	redistest.Eventually(t, func() string {
		if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", time.Second); err != nil {
			return err.Error()
		}
		return ""
	})
}

// TestPipeAuthAndDatabase: the backend URL's user, password and database
// are used on every connection, and a refused AUTH is reported.
func TestPipeAuthAndDatabase(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Config{
		Backends:                 []string{"redis://locker:s3cret@" + srv.Addr() + "/3"},
		DisableRestartQuarantine: true,
		NodeTimeout:              time.Second,
	})
	key := uniqueKey(t)
	if _, err := e.acquire(t.Context(), key, "tok", 10*time.Second); err != nil {
		t.Fatalf("acquire as locker on db 3: %v", err)
	}
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 3, Protocol: 2, DisableIdentity: true})
	defer db3.Close()
	if got, err := db3.Get(t.Context(), key).Result(); err != nil || got != "tok" {
		t.Fatalf("db 3 holds %q, %v; want tok", got, err)
	}

	bad := newEngine(t, Config{
		Backends:                 []string{"redis://locker:wrong@" + srv.Addr()},
		DisableRestartQuarantine: true,
		NodeTimeout:              time.Second,
	})
	_, err := bad.acquire(t.Context(), uniqueKey(t), "tok", time.Second)
	var nq *NoQuorumError
	if !errors.As(err, &nq) || len(nq.Nodes) != 1 || nq.Nodes[0].Kind() != KindAuth || !strings.Contains(nq.Nodes[0].Err.Error(), `authentication failed on backend `+srv.Addr()+` as user "locker"`) {
		t.Fatalf("acquire with a wrong password: %v", err)
	}
}

// TestPipeDeadBackendFailsFast: after a refused dial, requests to that
// backend fail at once instead of each dialling again, and they never
// reached it, so nothing there is rolled back.
func TestPipeDeadBackendFailsFast(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	c.servers[2].Kill()
	for range 5 {
		if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second); err != nil {
			t.Fatalf("acquire with one backend of three dead: %v", err)
		}
	}
	var got []error
	f := fanout(c.engine, backend.KeylessCommand("PING"), func(*node, backend.Reply) (struct{}, error) { return struct{}{}, nil })
	for _, v := range collectAll(t.Context(), f, 3) {
		if v.err != nil {
			got = append(got, v.err)
		}
	}
	if len(got) != 1 || !backend.WasNotSent(got[0]) || !backend.IsRefused(got[0]) {
		t.Fatalf("votes of a dead backend: %v; want one refused and never sent", got)
	}
}

// TestPipeUnixSocket: a backend named by a unix:// URL is reached over its
// socket.
func TestPipeUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv := redistest.Start(t, "--unixsocket", sock)
	e := newEngine(t, Config{Backends: []string{"unix://" + sock}, DisableRestartQuarantine: true, NodeTimeout: time.Second})
	key := uniqueKey(t)
	if _, err := e.acquire(t.Context(), key, "tok", 10*time.Second); err != nil {
		t.Fatalf("acquire over a unix socket: %v", err)
	}
	if got, err := srv.Client(t).Get(t.Context(), key).Result(); err != nil || got != "tok" {
		t.Fatalf("backend holds %q, %v; want tok", got, err)
	}
}

// TestCloseDoesNotWaitForDial: closing the engine ends a dial in progress
// at once instead of waiting out the backend timeout.
func TestCloseDoesNotWaitForDial(t *testing.T) {
	srv := redistest.Start(t)
	// The backend answers while New connects, then hangs: the next dial's
	// greeting waits for a reply that never comes.
	r := newRelay(t, srv.Addr())
	e, err := New(Config{Backends: []string{r.URL()}, NodeTimeout: time.Minute, DisableRestartQuarantine: true})
	if err != nil {
		t.Fatal(err)
	}
	r.silence()
	redistest.Eventually(t, func() string {
		if state := e.Backends()[0].State; state != StateDown {
			return "still " + state.String()
		}
		return ""
	})
	answered := make(chan error, 1)
	go func() {
		_, err := e.acquire(context.Background(), uniqueKey(t), "tok", time.Second)
		answered <- err
	}()
	redistest.Eventually(t, func() string {
		if r.held() == 0 {
			return "not dialling yet"
		}
		return ""
	})
	start := time.Now()
	e.Close()
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Close took %s with a dial in progress; the backend timeout is a minute", took)
	}
	if err := <-answered; !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("the acquisition in flight: %v, want no quorum", err)
	}
}
