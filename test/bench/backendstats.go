//go:build linux

package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What a lock cycle asks of the backends: the commands each runs (INFO
// commandstats, which counts the commands a script runs as well as the
// script), the time its scripts take, and the release notices sent
// (PUBLISH) and received (the proxy's INFO release_notices). Read around
// each system's rounds alone, as its CPU is: the backends are shared by
// every system measured in turns.

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	Calls int64 `json:"calls"`
	Usec  int64 `json:"usec"`
}

// commandStats are the counts by command name: "evalsha", "get",
// "client|setinfo".
type commandStats map[string]cmdStat

// benchOwn are the commands the bench itself sends the backends around
// the rounds (its readings, and a connection's greeting), not the
// systems' work.
var benchOwn = []string{"info", "hello", "client|setinfo", "client|setname", "config|get", "config|set"}

var cmdStatLine = regexp.MustCompile(`(?m)^cmdstat_([^:]+):calls=(\d+),usec=(\d+),`)

// parseCommandStats reads INFO commandstats, leaving out benchOwn.
func parseCommandStats(info string) commandStats {
	s := commandStats{}
	for _, m := range cmdStatLine.FindAllStringSubmatch(info, -1) {
		if slices.Contains(benchOwn, m[1]) {
			continue
		}
		calls, _ := strconv.ParseInt(m[2], 10, 64)
		usec, _ := strconv.ParseInt(m[3], 10, 64)
		s[m[1]] = cmdStat{calls, usec}
	}
	return s
}

// sub is what ran between before and s; a command gone from s (CONFIG
// RESETSTAT) counts as none.
func (s commandStats) sub(before commandStats) commandStats {
	d := commandStats{}
	for name, v := range s {
		b := before[name]
		if v.Calls > b.Calls {
			d[name] = cmdStat{v.Calls - b.Calls, max(v.Usec-b.Usec, 0)}
		}
	}
	return d
}

func (s commandStats) add(d commandStats) {
	for name, v := range d {
		t := s[name]
		s[name] = cmdStat{t.Calls + v.Calls, t.Usec + v.Usec}
	}
}

// backendWork is what one system's rounds asked of the backends, summed
// over the rounds.
type backendWork struct {
	stats commandStats // all backends together
	// notices is the release notices the system's proxy received;
	// noticesKnown is false for a system without a proxy, or one whose
	// INFO has no release_notices (a build from before them).
	notices      int64
	noticesKnown bool
}

func (w *backendWork) add(u backendWork) {
	if w.stats == nil {
		w.stats = commandStats{}
		w.noticesKnown = u.noticesKnown
	}
	w.stats.add(u.stats)
	w.notices += u.notices
	w.noticesKnown = w.noticesKnown && u.noticesKnown
}

// backendReading is the counters at one moment.
type backendReading struct {
	stats   commandStats
	notices int64
	known   bool
}

func (r backendReading) sub(before backendReading) backendWork {
	return backendWork{stats: r.stats.sub(before.stats), notices: r.notices - before.notices,
		noticesKnown: r.known && before.known}
}

// backendReader reads the backends' commandstats, and a proxy's notices.
type backendReader struct {
	backends []*redis.Client
	proxies  map[string]*redis.Client // by address
}

func newBackendReader(addrs []string) *backendReader {
	r := &backendReader{proxies: map[string]*redis.Client{}}
	for _, a := range addrs {
		// One connection each, opened by the first reading, before any
		// round: its greeting is not a round's.
		r.backends = append(r.backends, redis.NewClient(&redis.Options{Addr: a, PoolSize: 1, MaxRetries: -1}))
	}
	return r
}

func (r *backendReader) close() {
	for _, c := range r.backends {
		c.Close()
	}
	for _, c := range r.proxies {
		c.Close()
	}
}

// read returns the counters now: the commandstats of all backends summed,
// and the release notices of the proxy at proxy (none when empty).
func (r *backendReader) read(ctx context.Context, proxy string) (backendReading, error) {
	var rd backendReading
	rd.stats = commandStats{}
	for i, c := range r.backends {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return rd, fmt.Errorf("INFO commandstats of backend %d: %w", i, err)
		}
		rd.stats.add(parseCommandStats(info))
	}
	if proxy == "" {
		return rd, nil
	}
	c, ok := r.proxies[proxy]
	if !ok {
		c = redis.NewClient(&redis.Options{Addr: proxy, PoolSize: 1, MaxRetries: -1})
		r.proxies[proxy] = c
	}
	info, err := c.Info(ctx, "waits").Result()
	if err != nil {
		return rd, fmt.Errorf("INFO waits of the proxy on %s: %w", proxy, err)
	}
	rd.notices, rd.known = releaseNotices(info)
	return rd, nil
}

// releaseNotices is the release_notices field of a proxy's INFO; false
// when it has none.
func releaseNotices(info string) (int64, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "release_notices:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// backendPerCycle is what a lock cycle asked of the backends, in the
// rounds of one system and setting.
type backendPerCycle struct {
	// Backends is how many backends the system uses: 1 for direct.
	Backends int `json:"backends"`
	// Commands is all commands per cycle on one backend (all backends'
	// over Backends), scripts' inner commands included; ByCommand splits
	// it by command name.
	Commands  float64            `json:"commands_per_backend"`
	ByCommand map[string]float64 `json:"by_command_per_backend"`
	// ScriptUs is the time of EVAL and EVALSHA per cycle, all backends.
	ScriptUs float64 `json:"script_us"`
	// NoticesSent is PUBLISH and SPUBLISH per cycle, all backends;
	// NoticesReceived is the release notices the system's proxy received
	// per cycle, null when unknown.
	NoticesSent     float64  `json:"notices_sent"`
	NoticesReceived *float64 `json:"notices_received"`
}

// perCycle divides w over cycles and, for the commands, over backends;
// nil when there were no cycles or no readings.
func (w backendWork) perCycle(cycles int64, backends int) *backendPerCycle {
	if cycles <= 0 || backends <= 0 || w.stats == nil {
		return nil
	}
	n := float64(cycles)
	p := &backendPerCycle{Backends: backends, ByCommand: map[string]float64{}}
	for name, v := range w.stats {
		per := float64(v.Calls) / n / float64(backends)
		p.ByCommand[name] = per
		p.Commands += per
		switch name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro":
			p.ScriptUs += float64(v.Usec) / n
		case "publish", "spublish":
			p.NoticesSent += float64(v.Calls) / n
		}
	}
	if w.noticesKnown {
		p.NoticesReceived = ptr(float64(w.notices) / n)
	}
	return p
}

// breakdown is ByCommand as text, the most frequent first: "evalsha 2,
// get 1, set 1". Commands below 0.005 per cycle (a health check's) are
// left out.
func (p *backendPerCycle) breakdown() string {
	names := slices.SortedFunc(maps.Keys(p.ByCommand), func(a, b string) int {
		// As printed, so that 1 and 0.99998 tie and keep one order.
		if c := cmpDesc(math.Round(p.ByCommand[a]*100), math.Round(p.ByCommand[b]*100)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, name := range names {
		if v := p.ByCommand[name]; v >= 0.005 {
			parts = append(parts, name+" "+hundredths(v))
		}
	}
	return strings.Join(parts, ", ")
}

// hundredths is v to two decimals without trailing zeros: 2, 1.5, 0.33.
func hundredths(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
