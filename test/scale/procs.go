//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	firstRedisPort = 6379
	proxyPort      = 7379
	metricsPort    = 9379
	backendsPerGrp = 3
)

// tailBuffer keeps the last bytes a child wrote: enough to explain why it
// died, without 10,000 connections' worth of warnings filling memory. exec
// writes into it from a goroutine of its own, hence the lock.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 16<<10; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// child is a process started inside a namespace. ip netns exec execs the
// command in place, so the pid is the server's own and its /proc entries
// are the server's CPU and memory.
type child struct {
	name string
	cmd  *exec.Cmd
	log  *tailBuffer
}

// fleet is one configuration's servers: K groups of redis-servers and the
// proxies in front of all of them.
type fleet struct {
	children     []*child
	groups       [][]string // backend host:port, by group
	redisPIDs    []int
	proxyPIDs    []int
	proxyAddrs   []string
	metricsAddrs []string
}

func startIn(ns, name string, args ...string) (*child, error) {
	c := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	log := &tailBuffer{}
	c.Stdout, c.Stderr = log, log
	// Pdeathsig takes the servers down with the bench even when it is
	// killed outright, where no deferred cleanup runs.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &child{name: name, cmd: c, log: log}, nil
}

// startFleet starts k groups × 3 redis-servers, each group in its own
// namespace, then the proxies, each in its own, and returns once every
// server answers.
func startFleet(ctx context.Context, n *network, o *options, k int) (f *fleet, err error) {
	f = &fleet{}
	defer func() {
		if err != nil {
			f.stop()
			f = nil
		}
	}()
	dir, err := os.MkdirTemp("", "lpscale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // persistence is off: redis never writes there
	var urls []string
	for g := range k {
		h := n.groups[g]
		var addrs []string
		for b := range backendsPerGrp {
			port := strconv.Itoa(firstRedisPort + b)
			c, err := startIn(h.ns, fmt.Sprintf("redis g%d/%d", g, b), "redis-server",
				"--save", "", "--appendonly", "no", "--port", port, "--bind", h.ip,
				"--protected-mode", "no", "--dir", dir, "--maxclients", "10000")
			if err != nil {
				return f, err
			}
			f.children = append(f.children, c)
			addrs = append(addrs, net.JoinHostPort(h.ip, port))
		}
		f.groups = append(f.groups, addrs)
		urls = append(urls, "redis://"+strings.Join(addrs, ",redis://"))
	}
	for i, addr := range f.backendAddrs() {
		if err := waitPing(ctx, addr, f.children[i]); err != nil {
			return f, err
		}
		f.redisPIDs = append(f.redisPIDs, f.children[i].cmd.Process.Pid)
	}
	args := []string{"-restart-quarantine=false", "-log-level", "warn",
		"-max-clients", strconv.Itoa(o.conns + 1024), "-backend-timeout", o.backendTimeout.String(),
		"-max-ttl", "15m"}
	for _, u := range urls {
		args = append(args, "-groups", u)
	}
	var proxies []*child
	for p := range o.proxies {
		h := n.proxies[p]
		addr := net.JoinHostPort(h.ip, strconv.Itoa(proxyPort))
		metrics := net.JoinHostPort(h.ip, strconv.Itoa(metricsPort))
		c, err := startIn(h.ns, fmt.Sprintf("proxy %d", p), append([]string{o.proxyBin,
			"-listen", addr, "-metrics", metrics, "-pprof"}, args...)...)
		if err != nil {
			return f, err
		}
		f.children = append(f.children, c)
		proxies = append(proxies, c)
		f.proxyAddrs = append(f.proxyAddrs, addr)
		f.metricsAddrs = append(f.metricsAddrs, metrics)
		f.proxyPIDs = append(f.proxyPIDs, c.cmd.Process.Pid)
	}
	for i, addr := range f.proxyAddrs {
		if err := waitPing(ctx, addr, proxies[i]); err != nil {
			return f, err
		}
	}
	for _, pid := range append(append([]int{}, f.redisPIDs...), f.proxyPIDs...) {
		if comm := procComm(pid); comm == "ip" || comm == "" {
			return f, fmt.Errorf("pid %d is %q, not a server: ip netns exec did not exec in place, CPU figures would be wrong", pid, comm)
		}
	}
	// The proxies answer PING before their backends' connections are up;
	// the first lock through each to every group says they are.
	for _, addr := range f.proxyAddrs {
		if err := waitLocks(ctx, addr, k); err != nil {
			return f, err
		}
	}
	// Readiness locks must not count among the held locks' keys. lockproxy's
	// own keys stay: a FLUSHALL would take the backend set's record, and the
	// proxies would refuse locks until they record it again.
	for _, addr := range f.backendAddrs() {
		cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		err := cl.Eval(ctx, dropLocks, nil).Err()
		cl.Close()
		if err != nil {
			return f, fmt.Errorf("dropping the readiness locks on %s: %w", addr, err)
		}
	}
	return f, nil
}

// dropLocks deletes every key of a backend but lockproxy's own
// ({lockproxy}:...: the marker, the set record, the lease horizon).
const dropLocks = `for _, k in ipairs(redis.call("keys", "*")) do
	if string.sub(k, 1, 12) ~= "{lockproxy}:" then
		redis.call("del", k)
	end
end
return 0`

// lockKeys counts a backend's keys but lockproxy's own.
const lockKeys = `local n = 0
for _, k in ipairs(redis.call("keys", "*")) do
	if string.sub(k, 1, 12) ~= "{lockproxy}:" then
		n = n + 1
	end
end
return n`

func (f *fleet) backendAddrs() []string {
	var all []string
	for _, g := range f.groups {
		all = append(all, g...)
	}
	return all
}

// stop kills every server and waits for it, so that the next
// configuration's can bind the same addresses.
func (f *fleet) stop() {
	for _, c := range f.children {
		c.cmd.Process.Kill()
	}
	for _, c := range f.children {
		c.cmd.Wait()
	}
	f.children = nil
}

// waitPing polls addr with PING until it answers, its process exits, or
// 20s pass.
func waitPing(ctx context.Context, addr string, c *child) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, Protocol: 2})
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cl.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if exited(c.cmd.Process.Pid) {
			return fmt.Errorf("%s on %s exited:\n%s", c.name, addr, c.log.String())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s on %s: no PONG: %w\n%s", c.name, addr, err, c.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLocks polls until the proxy grants a lock on keys enough to reach
// every one of k groups with near certainty, then releases them.
func waitLocks(ctx context.Context, addr string, k int) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 8*k; i++ {
		key := fmt.Sprintf("lpscale:ready:%d", i)
		for {
			ok, err := cl.SetNX(ctx, key, "ready", 5*time.Second).Result()
			if err == nil && ok {
				break
			}
			if err == nil {
				err = errNotAcquired
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("proxy %s grants no lock on %s: %w", addr, key, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := releaseScript.Run(ctx, cl, []string{key}, "ready").Err(); err != nil {
			return fmt.Errorf("proxy %s release %s: %w", addr, key, err)
		}
	}
	return nil
}

var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// procStat returns the fields of /proc/PID/stat after the command name,
// which may hold spaces: f[0] is field 3, the state.
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])), true
}

// exited counts a zombie as gone: its parent has not waited yet.
func exited(pid int) bool {
	f, ok := procStat(pid)
	return !ok || (len(f) > 0 && f[0] == "Z")
}

func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// clockTick is the unit of /proc/PID/stat's times: USER_HZ is 100 on every
// Linux architecture Go runs on, and sysconf is out of reach without cgo.
const clockTick = time.Second / 100

// procCPU is utime+stime of pid, all its threads.
func procCPU(pid int) time.Duration {
	f, ok := procStat(pid)
	if !ok || len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

func sumCPU(pids []int) time.Duration {
	var t time.Duration
	for _, pid := range pids {
		t += procCPU(pid)
	}
	return t
}

// selfCPU is the load generator's CPU time, all threads, to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU is the busy and total jiffies of all cores since boot; idle
// and iowait are the idle part.
func machineCPU() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest times are already inside user and nice
			break
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total
}

// rss is pid's resident set in bytes, from VmRSS.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
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

func sumRSS(pids []int) int64 {
	var t int64
	for _, pid := range pids {
		t += rss(pid)
	}
	return t
}

// metric reads one unlabelled gauge from each proxy's /metrics and sums
// them; ok is false when any proxy does not export it.
func metric(ctx context.Context, addrs []string, name string) (sum float64, ok bool) {
	for _, addr := range addrs {
		v, found, err := scrape(ctx, addr, name)
		if err != nil || !found {
			return 0, false
		}
		sum += v
	}
	return sum, true
}

func scrape(ctx context.Context, addr, name string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			return v, err == nil, err
		}
	}
	return 0, false, sc.Err()
}

// liveHeap sums the proxies' Go heap right after a forced collection
// (pprof's heap profile with gc=1 runs one), which is what they keep
// alive: RSS also counts garbage and freed memory not yet returned to the
// system, so only this tells whether a proxy holds state per lock.
func liveHeap(ctx context.Context, f *fleet) *float64 {
	// Twice: sync.Pool keeps what it held for one collection more.
	for _, addr := range append(slices.Clone(f.metricsAddrs), f.metricsAddrs...) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
		if err != nil {
			return nil
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil
		}
	}
	v, ok := metric(ctx, f.metricsAddrs, "go_memstats_heap_alloc_bytes")
	if !ok {
		return nil
	}
	return &v
}

// raiseNoFile lifts the open-files limit before any child starts, so that
// the proxies and redis-servers inherit it: the load generator holds every
// idle connection, so it needs more than any proxy. It asks for want and
// settles for need where the hard limit cannot be raised (a container
// without CAP_SYS_RESOURCE).
func raiseNoFile(want, need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			return nil
		}
	}
	if lim.Max < need {
		return fmt.Errorf("open files hard limit %d, below the %d needed: lower -conns or raise it (ulimit -Hn)", lim.Max, need)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("setrlimit RLIMIT_NOFILE to %d: %w", lim.Cur, err)
	}
	return nil
}

var errNotAcquired = errors.New("lock not acquired")
