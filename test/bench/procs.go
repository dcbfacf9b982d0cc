//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// env owns the processes the bench starts and removes them on close.
type env struct {
	dir   string
	procs []*exec.Cmd
	proxy *exec.Cmd
	// fenced is the proxy of -fencing; nil without it.
	fenced *exec.Cmd
	// others are the proxies of -baseline-bin and -cost-table, by the
	// name of their system.
	others map[string]*exec.Cmd
	bin    string // the lockproxy built, once
	// unix makes every proxy started serve a Unix socket too, which
	// sockets maps its TCP address to.
	unix    bool
	sockets map[string]string
	// redisPIDs are the started redis-servers' own pids, 0 where unknown.
	redisPIDs []int
}

func newEnv() *env { return &env{} }

func (e *env) tempDir() (string, error) {
	if e.dir == "" {
		d, err := os.MkdirTemp("", "lockproxy-bench-")
		if err != nil {
			return "", err
		}
		e.dir = d
	}
	return e.dir, nil
}

// close kills every started process, waits for it, and removes the temp dir.
func (e *env) close() {
	// First the servers a wrapper may have started as its children: killing
	// the wrapper would leave them holding its output pipe, and Wait with it.
	for _, pid := range e.redisPIDs {
		if descendant(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, c := range e.procs {
		c.Process.Kill()
		c.Wait()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// start runs c; Pdeathsig takes it down with the bench even on SIGKILL.
func (e *env) start(c *exec.Cmd) error {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return err
	}
	e.procs = append(e.procs, c)
	return nil
}

// freePort returns a TCP port that was free a moment ago on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts n redis-servers without persistence and returns their
// addresses once each answers PING. A port taken between freePort and the
// bind is retried once with another port.
func (e *env) startRedis(ctx context.Context, n int) ([]string, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not in PATH (apt-get install redis-server), or pass -backends")
	}
	var addrs []string
	for range n {
		var addr string
		var err error
		for range 2 {
			if addr, err = e.startOneRedis(ctx); err == nil {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

func (e *env) startOneRedis(ctx context.Context) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	var log bytes.Buffer
	c := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	c.Stdout, c.Stderr = &log, &log
	if err := e.start(c); err != nil {
		return "", fmt.Errorf("redis-server: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitPing(ctx, addr, c); err != nil {
		return "", fmt.Errorf("redis-server on %s: %w\n%s", addr, err, log.String())
	}
	e.redisPIDs = append(e.redisPIDs, redisPID(ctx, addr))
	return addr, nil
}

// redisPID asks the server on addr for its pid rather than taking the
// started command's: redis-server in PATH may be a wrapper that runs it as
// a child, and the wrapper's CPU time would not be the server's. 0 if the
// server does not say, or names a process the bench did not start.
func redisPID(ctx context.Context, addr string) int {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	info, err := cl.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || !descendant(pid) {
				return 0
			}
			return pid
		}
	}
	return 0
}

// cpuClock reads the processes the bench started.
func (e *env) cpuClock() cpuClock {
	c := cpuClock{backends: e.redisPIDs}
	if e.proxy != nil {
		c.proxy = e.proxy.Process.Pid
	}
	if e.fenced != nil {
		c.fenced = e.fenced.Process.Pid
	}
	c.others = make(map[string]int, len(e.others))
	for name, p := range e.others {
		c.others[name] = p.Process.Pid
	}
	return c
}

// addOther records the proxy of system name, one of -baseline-bin's or
// -cost-table's.
func (e *env) addOther(name string, c *exec.Cmd) {
	if e.others == nil {
		e.others = make(map[string]*exec.Cmd)
	}
	e.others[name] = c
}

// waitPing waits until addr answers PING, c exits, or 10s pass.
func waitPing(ctx context.Context, addr string, c *exec.Cmd) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cl.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if c.ProcessState != nil || processGone(c) {
			return errors.New("exited")
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no PONG: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processGone reports whether c's process has exited (a zombie counts).
func processGone(c *exec.Cmd) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// buildProxy builds lockproxy from the module root, found with go env GOMOD,
// the first time it is asked.
func (e *env) buildProxy(ctx context.Context) (string, error) {
	if e.bin != "" {
		return e.bin, nil
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	dir, err := e.tempDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "lockproxy")
	if err := goBuild(ctx, root, []string{"build", "-o", bin, "."}); err != nil {
		return "", err
	}
	e.bin = bin
	return bin, nil
}

// moduleRoot is the directory of the lockproxy module the bench runs in,
// from go env GOMOD.
func moduleRoot(ctx context.Context) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the lockproxy module: run from the repository or pass -proxy-bin")
	}
	return filepath.Dir(mod), nil
}

// goBuild runs go with args in the module root.
func goBuild(ctx context.Context, root string, args []string) error {
	c := exec.CommandContext(ctx, "go", args...)
	c.Dir = root
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// startProxy starts lockproxy over backends on a free port, without restart
// quarantine (the backends are fresh; quarantine would refuse locks for
// max_ttl), and returns its address once it grants a lock.
func (e *env) startProxy(ctx context.Context, bin string, backends, extra []string) (string, *exec.Cmd, error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	urls := make([]string, len(backends))
	for i, b := range backends {
		urls[i] = "redis://" + b
	}
	args := append([]string{"-listen", addr, "-backends", strings.Join(urls, ","),
		"-restart-quarantine=false", "-log-level", "warn"}, extra...)
	if e.unix {
		dir, err := e.tempDir()
		if err != nil {
			return "", nil, err
		}
		socket := filepath.Join(dir, fmt.Sprintf("proxy-%d.sock", port))
		args = append(args, "-unix-socket", socket)
		if e.sockets == nil {
			e.sockets = make(map[string]string)
		}
		e.sockets[addr] = socket
	}
	c := exec.Command(bin, args...)
	// One buffer per proxy: exec copies into it from a goroutine of its own.
	var log bytes.Buffer
	c.Stdout, c.Stderr = &log, &log
	if err := e.start(c); err != nil {
		return "", nil, fmt.Errorf("lockproxy: %w", err)
	}
	if err := waitLock(ctx, addr, c); err != nil {
		return "", nil, fmt.Errorf("lockproxy on %s: %w\n%s", addr, err, log.String())
	}
	return addr, c, nil
}

// waitLock waits until the proxy grants and releases a lock.
func waitLock(ctx context.Context, addr string, c *exec.Cmd) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer cl.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := cl.Do(ctx, "set", "bench:ready", "t", "nx", "px", 1000).Err()
		if err == nil {
			return releaseScript.Run(ctx, cl, []string{"bench:ready"}, "t").Err()
		}
		if processGone(c) {
			return errors.New("exited")
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no lock granted: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxyRSS returns the started proxy's resident set in bytes, 0 if unknown.
func (e *env) proxyRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.proxy.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) == 2 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
