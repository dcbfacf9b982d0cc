//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/PID/stat's times, 1/sysconf(_SC_CLK_TCK):
// USER_HZ is 100 on every Linux architecture Go runs on, and sysconf is out
// of reach without cgo.
const clockTick = time.Second / 100

// cpuClock reads the CPU time used so far by the three parts of the load
// on the machine: the bench's workers, the proxy, and the backends. A pid
// of 0 (proxy) or nil pids (backends) is a process the bench did not start.
type cpuClock struct {
	proxy  int
	fenced int // the proxy of -fencing
	// others are the proxies of -baseline-bin and -cost-table, by the
	// name of their system.
	others   map[string]int
	backends []int
}

// of is the clock of system's rounds: its proxy column is the fenced
// proxy's for proxy-fenced, that of the system's own for baseline and the
// variants of -cost-table, the plain one's for the others.
func (c cpuClock) of(system string) cpuClock {
	if system == "proxy-fenced" {
		c.proxy = c.fenced
	} else if pid, ok := c.others[system]; ok {
		c.proxy = pid
	}
	return c
}

// cpuTimes is CPU time, user plus system, of each part; a missing part
// could not be read.
type cpuTimes struct {
	client, proxy, backends time.Duration
	proxyMissing            bool
	backendsMissing         bool
}

func (c cpuClock) read() cpuTimes {
	var t cpuTimes
	t.client = selfCPU()
	var ok bool
	t.proxy, ok = procCPU(c.proxy)
	t.proxyMissing = !ok
	t.backendsMissing = len(c.backends) == 0
	for _, pid := range c.backends {
		d, ok := procCPU(pid)
		t.backends += d
		t.backendsMissing = t.backendsMissing || !ok
	}
	return t
}

// sub is the CPU time used between u and t.
func (t cpuTimes) sub(u cpuTimes) cpuTimes {
	return cpuTimes{
		client: t.client - u.client, proxy: t.proxy - u.proxy, backends: t.backends - u.backends,
		proxyMissing:    t.proxyMissing || u.proxyMissing,
		backendsMissing: t.backendsMissing || u.backendsMissing,
	}
}

func (t *cpuTimes) add(u cpuTimes) {
	t.client += u.client
	t.proxy += u.proxy
	t.backends += u.backends
	t.proxyMissing = t.proxyMissing || u.proxyMissing
	t.backendsMissing = t.backendsMissing || u.backendsMissing
}

// selfCPU is the bench's own CPU time, all its threads, to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is utime+stime of pid, all its threads, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, bool) {
	f, ok := procStat(pid)
	if !ok || len(f) < 13 {
		return 0, false
	}
	// Fields 14 and 15 of proc(5); f starts at field 3.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// procStat returns the fields of /proc/PID/stat after the command name,
// which may hold spaces: f[0] is field 3, the state.
func procStat(pid int) ([]string, bool) {
	if pid <= 0 {
		return nil, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])), true
}

// descendant reports whether pid is a child, grandchild, … of the bench:
// a pid a server reports of itself is only ours to read if we started it
// (one in a container would name a process of another namespace).
func descendant(pid int) bool {
	self := os.Getpid()
	for range 64 {
		f, ok := procStat(pid)
		if !ok || len(f) < 2 {
			return false
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil || ppid <= 1 {
			return false
		}
		if ppid == self {
			return true
		}
		pid = ppid
	}
	return false
}

// cpuPerCycle is microseconds of CPU per lock cycle; null when not known.
type cpuPerCycle struct {
	Client   *float64 `json:"client"`
	Proxy    *float64 `json:"proxy"`
	Backends *float64 `json:"backends"`
	Total    *float64 `json:"total"`
}

// cpuFigures turns one cell's CPU time into per-cycle costs and the share
// of the machine's cores the three parts kept busy during its rounds.
func cpuFigures(t cpuTimes, cycles int64, elapsed time.Duration, cpus int) (*cpuPerCycle, *float64) {
	total := t.client + t.proxy + t.backends
	totalMissing := t.proxyMissing || t.backendsMissing
	var busy *float64
	if !totalMissing && elapsed > 0 {
		busy = ptr(total.Seconds() / (elapsed.Seconds() * float64(cpus)))
	}
	if cycles == 0 {
		return nil, busy
	}
	us := func(d time.Duration, missing bool) *float64 {
		if missing {
			return nil
		}
		return ptr(d.Seconds() * 1e6 / float64(cycles))
	}
	return &cpuPerCycle{
		Client:   us(t.client, false),
		Proxy:    us(t.proxy, t.proxyMissing),
		Backends: us(t.backends, t.backendsMissing),
		Total:    us(total, totalMissing),
	}, busy
}

func ptr(v float64) *float64 { return &v }
