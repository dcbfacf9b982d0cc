//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// The waiting bench (-waiting): what the proxy's blocking acquire saves
// against clients that poll, with every contender on one key, and how soon
// a waiter on one proxy is woken by a release through another, or by the
// holder's time running out.

// waitingOptions are the flags of -waiting.
type waitingOptions struct {
	contenders []int
	hold       time.Duration
	wakes      int
}

// waitingRow is one system at one number of contenders.
type waitingRow struct {
	System     string  `json:"system"` // polling or blocking
	Contenders int     `json:"contenders"`
	Grants     int64   `json:"grants"`
	PerSec     float64 `json:"grants_per_sec"`
	// Commands are the commands the backends ran (INFO stats
	// total_commands_processed, summed over them; Redis counts those a
	// script runs too) per granted lock; Attempts the clients' acquire
	// commands per grant.
	Commands float64 `json:"backend_commands_per_grant"`
	Attempts float64 `json:"client_attempts_per_grant"`
	// BackendsCPU is the backends' CPU per grant, µs; nil when unknown.
	BackendsCPU *float64 `json:"backends_cpu_us_per_grant"`
	Wait        latency  `json:"wait"` // from the first attempt to the grant
}

// waitingReport is what -waiting measured.
type waitingReport struct {
	Rows []waitingRow `json:"rows"`
	// Wake is from the release through proxy A being sent to the grant of
	// the waiter on proxy B; Expiry from the holder's lock running out
	// (it never released) to the grant of the waiter.
	Wake   latency `json:"wake_across_proxies"`
	Expiry latency `json:"wake_after_expiry"`
}

// runWaiting runs the waiting bench on proxy, starting a second proxy over
// the same backends.
func runWaiting(ctx context.Context, o *options, e *env, proxy string, out io.Writer) (*waitingReport, error) {
	bin, args, err := proxyCommand(ctx, o, e)
	if err != nil {
		return nil, err
	}
	second, _, err := e.startProxy(ctx, bin, o.backends, args)
	if err != nil {
		return nil, err
	}
	rep := &waitingReport{}
	fmt.Fprintf(out, "waiting: %d backends, proxies %s and %s; one key, hold %s, polling clients pause %s after a failed try\n",
		len(o.backends), proxy, second, o.waiting.hold, o.retryDelay)
	backends := make([]*redis.Client, len(o.backends))
	for i, b := range o.backends {
		backends[i] = redis.NewClient(&redis.Options{Addr: b, MaxRetries: -1})
		defer backends[i].Close()
	}
	clock := e.cpuClock()
	for _, n := range o.waiting.contenders {
		for _, blocking := range []bool{false, true} {
			row, err := contend(ctx, o, proxy, backends, clock, n, blocking)
			if err != nil {
				return nil, err
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	if rep.Wake, err = wakeAcross(ctx, proxy, second, o.waiting.wakes, false); err != nil {
		return nil, err
	}
	if rep.Expiry, err = wakeAcross(ctx, proxy, second, max(o.waiting.wakes/10, 5), true); err != nil {
		return nil, err
	}
	rep.print(out)
	return rep, nil
}

// contend runs n contenders on one key through proxy for o.duration:
// polling (SET NX PX, a pause after a failure) or blocking (LOCK.ACQUIRE
// ... WAIT), each holding the lock for the hold time, then releasing it.
func contend(ctx context.Context, o *options, proxy string, backends []*redis.Client, clock cpuClock, n int, blocking bool) (waitingRow, error) {
	row := waitingRow{System: "polling", Contenders: n}
	if blocking {
		row.System = "blocking"
	}
	key := fmt.Sprintf("bench:wait:%s:%d", row.System, n)
	cl := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: -1, PoolSize: n + 4, ReadTimeout: 2 * o.ttl})
	defer cl.Close()
	commandsBefore, err := totalCommands(ctx, backends)
	if err != nil {
		return row, err
	}
	cpuBefore := clock.read()
	var (
		grants, attempts atomic.Int64
		mu               sync.Mutex
		waits            []int64
		firstErr         atomic.Value
		wg               sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(o.duration)
	for w := range n {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				token := fmt.Sprintf("%d-%d", w, i)
				began := time.Now()
				for {
					attempts.Add(1)
					var err error
					if blocking {
						err = cl.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", o.ttl.Milliseconds(), "WAIT", time.Until(deadline).Milliseconds()+1).Err()
					} else if ok, serr := cl.SetNX(ctx, key, token, o.ttl).Result(); serr != nil {
						err = serr
					} else if !ok {
						err = redis.Nil // held elsewhere
					}
					if err == nil {
						break
					}
					if !errors.Is(err, redis.Nil) {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					if !time.Now().Before(deadline) {
						return
					}
					if !blocking {
						time.Sleep(o.retryDelay)
					}
				}
				got := time.Now()
				time.Sleep(o.waiting.hold)
				if err := releaseScript.Run(context.WithoutCancel(ctx), cl, []string{key}, token).Err(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				grants.Add(1)
				mu.Lock()
				waits = append(waits, int64(got.Sub(began)))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return row, fmt.Errorf("%s, %d contenders: %w", row.System, n, err)
	}
	used := clock.read().sub(cpuBefore)
	commandsAfter, err := totalCommands(ctx, backends)
	if err != nil {
		return row, err
	}
	row.Grants = grants.Load()
	row.PerSec = float64(row.Grants) / elapsed.Seconds()
	if row.Grants > 0 {
		row.Commands = float64(commandsAfter-commandsBefore) / float64(row.Grants)
		row.Attempts = float64(attempts.Load()) / float64(row.Grants)
		if !used.backendsMissing {
			us := float64(used.backends.Microseconds()) / float64(row.Grants)
			row.BackendsCPU = &us
		}
	}
	row.Wait = percentiles(waits)
	return row, nil
}

// totalCommands sums the backends' INFO stats total_commands_processed.
func totalCommands(ctx context.Context, backends []*redis.Client) (int64, error) {
	var sum int64
	for _, b := range backends {
		info, err := b.Info(ctx, "stats").Result()
		if err != nil {
			return 0, err
		}
		_, rest, ok := strings.Cut(info, "total_commands_processed:")
		if !ok {
			return 0, errors.New("backend INFO stats has no total_commands_processed")
		}
		n, err := strconv.ParseInt(strings.TrimSpace(rest[:strings.IndexByte(rest, '\n')]), 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// wakeAcross measures, n times, how soon a waiter on proxy b is granted a
// lock held through proxy a: after its release through a, or, with
// expiry, after the holder's 200 ms lock ran out without a release.
func wakeAcross(ctx context.Context, a, b string, n int, expiry bool) (latency, error) {
	holder := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
	defer holder.Close()
	waiter := redis.NewClient(&redis.Options{Addr: b, MaxRetries: -1, ReadTimeout: time.Minute})
	defer waiter.Close()
	const ttl = 200 * time.Millisecond
	var samples []int64
	for i := range n {
		key := fmt.Sprintf("bench:wake:%t:%d", expiry, i)
		holdTTL := 30 * time.Second
		if expiry {
			holdTTL = ttl
		}
		if ok, err := holder.SetNX(ctx, key, "holder", holdTTL).Result(); err != nil || !ok {
			return latency{}, fmt.Errorf("wake: holder's SET NX: %v %v", ok, err)
		}
		taken := time.Now()
		granted := make(chan error, 1)
		var at time.Time
		go func() {
			err := waiter.Do(ctx, "LOCK.ACQUIRE", key, "waiter", "PX", 30000, "WAIT", 20000).Err()
			at = time.Now()
			granted <- err
		}()
		if err := awaitWaiting(ctx, waiter); err != nil {
			return latency{}, err
		}
		from := taken.Add(ttl)
		if !expiry {
			from = time.Now()
			if err := releaseScript.Run(ctx, holder, []string{key}, "holder").Err(); err != nil {
				return latency{}, err
			}
		}
		if err := <-granted; err != nil {
			return latency{}, fmt.Errorf("wake %d: waiter: %w", i, err)
		}
		samples = append(samples, int64(at.Sub(from)))
		releaseScript.Run(ctx, waiter, []string{key}, "waiter")
	}
	return percentiles(samples), nil
}

// awaitWaiting polls the waiter's proxy until it counts one waiter.
func awaitWaiting(ctx context.Context, cl *redis.Client) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		info, err := cl.Info(ctx, "waits").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "waiters:1\r\n") {
			// It may not have tried yet: a release before its first try
			// is found by that try, and still measured from the release.
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("wake: the waiter never showed in INFO waits")
}

func (r *waitingReport) print(out io.Writer) {
	fmt.Fprintln(out, "\nOne key, every contender on it (polling: SET NX PX and a pause; blocking: LOCK.ACQUIRE ... WAIT)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contenders\tsystem\tgrants/s\tbackend cmds/grant\tattempts/grant\tbackends CPU µs/grant\twait p50 ms\twait p99 ms\t")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.1f\t%.2f\t%s\t%.2f\t%.2f\t\n", x.Contenders, x.System, x.PerSec, x.Commands, x.Attempts,
			usOrUnknown(x.BackendsCPU), x.Wait.P50/1e3, x.Wait.P99/1e3)
	}
	tw.Flush()
	var contenders []int
	for _, x := range r.Rows {
		if !slices.Contains(contenders, x.Contenders) {
			contenders = append(contenders, x.Contenders)
		}
	}
	for _, n := range contenders {
		var p, b *waitingRow
		for i := range r.Rows {
			switch x := &r.Rows[i]; {
			case x.Contenders == n && x.System == "polling":
				p = x
			case x.Contenders == n && x.System == "blocking":
				b = x
			}
		}
		if p != nil && b != nil && p.Commands > 0 && p.PerSec > 0 {
			fmt.Fprintf(out, "  %d contenders: blocking/polling grants/s %.2f, backend commands per grant %.2f\n",
				n, b.PerSec/p.PerSec, b.Commands/p.Commands)
		}
	}
	fmt.Fprintf(out, "\nWake-up of a waiter on proxy B (LOCK.ACQUIRE ... WAIT)\n")
	fmt.Fprintf(out, "  after a release through proxy A: p50 %.2f ms, p99 %.2f ms (%d samples)\n",
		r.Wake.P50/1e3, r.Wake.P99/1e3, r.Wake.N)
	fmt.Fprintf(out, "  after the holder's 200 ms lock ran out, no release: p50 %.2f ms, p99 %.2f ms (%d samples)\n",
		r.Expiry.P50/1e3, r.Expiry.P99/1e3, r.Expiry.N)
}
