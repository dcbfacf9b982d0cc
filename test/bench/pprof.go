//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// pprofClient reads the proxy's Go profiles from its metrics address
// (lockproxy -metrics ADDR -pprof).
type pprofClient struct{ addr string }

// get returns the body of path, and an error for any status but 200: the
// pprof handlers explain a refusal (a profile already running, say) in it.
func (p pprofClient) get(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// wait returns once the profiles answer. The proxy opens its metrics
// listener after its client one, so a granted lock does not prove it; and
// a wrong -pprof-addr should fail now, not after the first rounds.
func (p pprofClient) wait(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := p.get(ctx, "/debug/pprof/", time.Second)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pprof on %s (lockproxy -metrics ADDR -pprof): %w", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pprofOf is where the system serves its Go profiles; empty for one that
// does not (the clients' systems, or a proxy started without -profile).
func (o *options) pprofOf(system string) string {
	switch system {
	case "proxy":
		return o.pprofAddr
	case "proxy-fenced":
		return o.fencedPprofAddr
	}
	return ""
}

// profileRound starts a CPU profile of the proxy for a round of d that
// starts now, and returns a wait for it that yields the file it wrote. The
// profile covers whole seconds, so it ends within the round when d >= 1s.
func (p pprofClient) profileRound(ctx context.Context, dir, system string, st setting, d time.Duration) func() (string, error) {
	secs := max(int(d/time.Second), 1)
	path := profileFile(dir, system, st)
	done := make(chan error, 1)
	go func() {
		b, err := p.get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), time.Duration(secs)*time.Second+30*time.Second)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		done <- err
	}()
	return func() (string, error) {
		if err := <-done; err != nil {
			return "", fmt.Errorf("CPU profile of %s, %s %d workers: %w", system, st.mode(), st.workers, err)
		}
		return path, nil
	}
}

func profileFile(dir, system string, st setting) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pprof", system, st.mode(), st.workers))
}

// goroutines reads the count from the first line of the text goroutine
// profile, "goroutine profile: total N", without the stacks' cost of debug=2.
func (p pprofClient) goroutines(ctx context.Context) (int, error) {
	b, err := p.get(ctx, "/debug/pprof/goroutine?debug=1", 10*time.Second)
	if err != nil {
		return 0, err
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	n, err := strconv.Atoi(strings.TrimPrefix(string(first), "goroutine profile: total "))
	if err != nil {
		return 0, fmt.Errorf("goroutine profile: unexpected first line %q", first)
	}
	return n, nil
}

// heapInuse reads "# HeapInuse = N" of the text heap profile. gc=1 makes
// the proxy collect first, so the figure is the live heap and does not
// swing with where its GC cycle happens to be.
func (p pprofClient) heapInuse(ctx context.Context) (int64, error) {
	b, err := p.get(ctx, "/debug/pprof/heap?debug=1&gc=1", 10*time.Second)
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(string(b), "\n# HeapInuse = ")
	if !ok {
		return 0, errors.New("heap profile: no HeapInuse line")
	}
	v, _, _ := strings.Cut(rest, "\n")
	return strconv.ParseInt(v, 10, 64)
}
