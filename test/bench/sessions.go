//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// The session bench (-sessions N): what N session-bound locks cost while
// they are held, each on a connection of its own (SET k token NX, no
// TTL), against the same N connections open and idle, in the same run:
// the proxy's CPU, the renewals it makes, and the scripts each backend
// runs for them, against the one script per renewal that renewing each
// lock on its own would cost.

// sessionReport is what -sessions measured.
type sessionReport struct {
	Locks    int    `json:"locks"`
	Lease    string `json:"lease"`
	Measured string `json:"measured"`
	// Idle and Held are the same connections, without locks and with one
	// session lock each.
	Idle sessionFigures `json:"idle"`
	Held sessionFigures `json:"held"`
	// Budget is the renewals a second that a third of the lease asks for:
	// locks × 3 / lease.
	Budget float64 `json:"renewals_per_sec_budget"`
}

// sessionFigures are one phase's figures, per second of it.
type sessionFigures struct {
	ProxyCPU       float64 `json:"proxy_cpu_share_of_a_core"` // -1 when unknown
	RenewalsPerSec float64 `json:"renewals_per_sec"`
	ScriptsPerSec  float64 `json:"backend_scripts_per_sec_each"` // EVALSHA and EVAL, the mean over the backends
	Late           int64   `json:"late_renewals"`
	Lost           int64   `json:"lost"`
	RSS            int64   `json:"proxy_rss_bytes"` // 0 when unknown
}

// runSessions measures n session locks on proxy, each measurement
// o.duration long.
func runSessions(ctx context.Context, o *options, e *env, proxy string, n int, out io.Writer) (*sessionReport, error) {
	lease, err := sessionLease(ctx, proxy)
	if err != nil {
		return nil, err
	}
	rep := &sessionReport{Locks: n, Lease: lease.String(), Measured: o.duration.String(),
		Budget: float64(n) * 3 / lease.Seconds()}
	fmt.Fprintf(out, "sessions: %d backends, proxy %s; %d connections, lease %s, each phase %s\n",
		len(o.backends), proxy, n, lease, o.duration)
	backends := make([]*redis.Client, len(o.backends))
	for i, b := range o.backends {
		backends[i] = redis.NewClient(&redis.Options{Addr: b, MaxRetries: -1})
		defer backends[i].Close()
	}
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err := onEach(ctx, conns, func(i int) (err error) {
		conns[i], err = ping(proxy)
		return err
	}); err != nil {
		return nil, err
	}
	if rep.Idle, err = measureSessions(ctx, e, proxy, backends, o.duration); err != nil {
		return nil, err
	}
	if err := onEach(ctx, conns, func(i int) error {
		return exchange(conns[i], fmt.Sprintf("*4\r\n$3\r\nSET\r\n$%d\r\nbench:session:%d\r\n$5\r\ntoken\r\n$2\r\nNX\r\n",
			len(fmt.Sprintf("bench:session:%d", i)), i), "+OK\r\n")
	}); err != nil {
		return nil, err
	}
	// A lease, so that the renewals run at their steady pace.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(lease):
	}
	if rep.Held, err = measureSessions(ctx, e, proxy, backends, o.duration); err != nil {
		return nil, err
	}
	rep.print(out, len(o.backends))
	return rep, nil
}

// onEach runs f for every connection index, 32 at a time.
func onEach(ctx context.Context, conns []net.Conn, f func(i int) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	const workers = 32
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(conns) && ctx.Err() == nil; i += workers {
				if err := f(i); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("connection %d: %w", i, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return cmpOr(firstErr, ctx.Err())
}

// exchange sends req on c and checks that the reply is want.
func exchange(c net.Conn, req, want string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != want {
		return fmt.Errorf("answered %q, want %q", buf, want)
	}
	return nil
}

// measureSessions measures d of the proxy as it is.
func measureSessions(ctx context.Context, e *env, proxy string, backends []*redis.Client, d time.Duration) (sessionFigures, error) {
	f := sessionFigures{ProxyCPU: -1}
	clock := e.cpuClock()
	before, err := sessionInfo(ctx, proxy)
	if err != nil {
		return f, err
	}
	scriptsBefore, err := scriptCalls(ctx, backends)
	if err != nil {
		return f, err
	}
	cpuBefore := clock.read()
	start := time.Now()
	select {
	case <-ctx.Done():
		return f, ctx.Err()
	case <-time.After(d):
	}
	used := clock.read().sub(cpuBefore)
	elapsed := time.Since(start).Seconds()
	after, err := sessionInfo(ctx, proxy)
	if err != nil {
		return f, err
	}
	scriptsAfter, err := scriptCalls(ctx, backends)
	if err != nil {
		return f, err
	}
	if !used.proxyMissing {
		f.ProxyCPU = used.proxy.Seconds() / elapsed
	}
	f.RenewalsPerSec = float64(after["session_renewals"]-before["session_renewals"]) / elapsed
	f.ScriptsPerSec = float64(scriptsAfter-scriptsBefore) / elapsed / float64(len(backends))
	f.Late = after["session_late_renewals"] - before["session_late_renewals"]
	for k, v := range after {
		if len(k) > len("session_lost_") && k[:len("session_lost_")] == "session_lost_" {
			f.Lost += v - before[k]
		}
	}
	if e.proxy != nil {
		f.RSS = e.proxyRSS()
	}
	return f, nil
}

var infoField = regexp.MustCompile(`(?m)^(\w+):(\d+)\r?$`)

// sessionInfo reads INFO sessions of the proxy.
func sessionInfo(ctx context.Context, proxy string) (map[string]int64, error) {
	cl := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: -1})
	defer cl.Close()
	info, err := cl.Info(ctx, "sessions").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO sessions: %w", err)
	}
	out := map[string]int64{}
	for _, m := range infoField.FindAllStringSubmatch(info, -1) {
		out[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	if _, ok := out["session_renewals"]; !ok {
		return nil, fmt.Errorf("INFO sessions of %s has no session_renewals: not a lockproxy with session-bound locks", proxy)
	}
	return out, nil
}

var scriptStat = regexp.MustCompile(`(?m)^cmdstat_eval(?:sha)?:calls=(\d+),`)

// scriptCalls sums the scripts the backends ran (INFO commandstats).
func scriptCalls(ctx context.Context, backends []*redis.Client) (int64, error) {
	var n int64
	for _, b := range backends {
		s, err := b.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %w", err)
		}
		for _, m := range scriptStat.FindAllStringSubmatch(s, -1) {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			n += v
		}
	}
	return n, nil
}

// sessionLease is the proxy's session lease, from its INFO: the bench
// measures the proxy as started (-proxy-args "-session-lease 10s").
func sessionLease(ctx context.Context, proxy string) (time.Duration, error) {
	cl := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: -1})
	defer cl.Close()
	info, err := cl.Info(ctx, "sessions").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO sessions: %w", err)
	}
	m := regexp.MustCompile(`(?m)^session_lease_ms:(\d+)\r?$`).FindStringSubmatch(info)
	if m == nil {
		return 0, fmt.Errorf("INFO sessions of %s has no session_lease_ms", proxy)
	}
	ms, _ := strconv.ParseInt(m[1], 10, 64)
	return time.Duration(ms) * time.Millisecond, nil
}

func (r *sessionReport) print(out io.Writer, backends int) {
	fmt.Fprintf(out, "\nSession-bound locks (%d, one per connection, lease %s; per second of %s)\n", r.Locks, r.Lease, r.Measured)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tproxy CPU (% of a core)\trenewals/s\tscripts/s per backend\tlocks per script\tlate renewals\tlost\tproxy RSS MiB\t")
	for _, p := range []struct {
		name string
		f    sessionFigures
	}{{"connections idle", r.Idle}, {"a session lock each", r.Held}} {
		cpu := "n/a"
		if p.f.ProxyCPU >= 0 {
			cpu = fmt.Sprintf("%.1f", 100*p.f.ProxyCPU)
		}
		per := "-"
		if p.f.ScriptsPerSec > 0 {
			per = fmt.Sprintf("%.1f", p.f.RenewalsPerSec/p.f.ScriptsPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.1f\t%s\t%d\t%d\t%.1f\t\n", p.name, cpu, p.f.RenewalsPerSec, p.f.ScriptsPerSec, per,
			p.f.Late, p.f.Lost, float64(p.f.RSS)/(1<<20))
	}
	tw.Flush()
	fmt.Fprintf(out, "  budget: %d locks renewed at a third of a %s lease = %.0f renewals/s; one script per renewal would be %.0f scripts/s per backend (%d backends)\n",
		r.Locks, r.Lease, r.Budget, r.Budget, backends)
	if r.Held.ScriptsPerSec > 0 {
		fmt.Fprintf(out, "  batched: %.3f × the scripts of one per renewal\n", r.Held.ScriptsPerSec/r.Budget)
	}
}
