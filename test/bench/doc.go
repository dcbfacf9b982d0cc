//go:build linux

// Command bench measures lockproxy side by side with what a user would run
// instead, in one run on the same backends:
//
//   - direct:  one Redis (backend 0) with the single-node recipe, go-redis v9
//     SET key token NX PX ttl, then a compare-and-delete script (EVALSHA);
//   - redsync: client-side Redlock with go-redsync/redsync v4 over all backends;
//   - proxy:   the single-node recipe of direct, sent to lockproxy, which runs
//     Redlock over the same backends.
//
// The systems run in turns (direct, redsync, proxy, then proxy, redsync,
// direct in the next round, …) for every concurrency, uncontended (each
// worker on its own key) and contended (all workers on 8 keys), so machine
// drift hits all three alike. It then opens
// 10,000 idle connections to the proxy and reports the RSS they cost.
//
// Everything shares the machine's cores, so it also reports where their
// CPU went per lock cycle: the bench's own (the clients), the proxy's and
// the redis-servers', read around every round from getrusage and
// /proc/PID/stat; the parts the bench did not start show as "?". Beside
// it, what a cycle asks of the backends, read the same way around each
// system's rounds alone: the commands each backend runs (INFO
// commandstats, a script's own commands counted as well as the script,
// by command name), the scripts' time, the release notices sent (PUBLISH)
// and those the system's own proxy received (its INFO release_notices).
//
// Usage:
//
//	go run ./test/bench [-duration 2s] [-rounds 3] [-concurrency 1,8,32,128] [-json FILE]
//		[-profile DIR] [-soak 10m] [-soak-workers 32] [-fencing] [-systems LIST]
//		[-open-loop RATES] [-baseline-bin BIN] [-cost-table]
//
// By default it starts 5 redis-servers and builds and starts lockproxy
// itself, and kills them on exit (Ctrl-C too). It needs redis-server in PATH
// unless -backends is given.
//
// -profile DIR takes a CPU profile of the proxy during the first measured
// round of the proxy in every setting and writes it to
// DIR/proxy-<uncontended|contended>-<workers>.pprof, for go tool pprof
// (with -fencing, the fenced one's to DIR/proxy-fenced-…). The
// profile covers the round's whole seconds (at least one; a shorter round
// waits for it), and the proxy pays for it while it runs, so that round's
// figures are a little lower. The started proxy gets -metrics on a free port
// and -pprof for it; an external one (-proxy) needs -pprof-addr HOST:PORT,
// its -metrics address, started with -pprof.
//
// -fencing (for issue 14's "fencing on within 10% of fencing off") starts a
// second lockproxy, the same binary and flags with -fencing, over the same
// backends, and measures it as a fourth system, proxy-fenced, in turns
// with the others: a table then gives fenced over plain for throughput and
// acquire p50 and p99 and the difference of their CPU per cycle, figures
// of one run, as only ratios within one run mean much on a shared machine.
// -systems proxy,proxy-fenced leaves out direct and redsync, for a
// shorter run.
//
// -baseline-bin BIN starts that lockproxy binary (a previous release's)
// with the plain one's flags over the same backends and measures it as the
// system baseline in turns with the others: proxy over baseline, round by
// round, for before-and-after figures of one run.
//
// -cost-table (issue 40's budget per lock cycle) builds this tree once more
// per feature with that feature's per-cycle work off (go build -ldflags
// "-X github.com/lockproxy/lockproxy/quorum.measureWithout=FEATURE", for
// setcheck, stamp, horizon, notice, topup, and all of them), starts each as
// a system of its own (without-FEATURE) with the plain one's flags over the
// same backends, measures them in turns with the full build (proxy) and
// -baseline-bin's, and prints a markdown table: cycles/s and the ratio to
// the full build by round, and per cycle the backend commands, the
// backends' CPU and scripts' time, the proxy's CPU, and the notices
// received. -baseline-bin's and -cost-table's systems are measured
// whatever -systems says, so -systems proxy -cost-table is the short run.
// The other proxies stay up while one is measured: what they do idle (a
// health check, a notice they listen for) lands in its rounds' backend
// figures.
//
// -soak DURATION (for the acceptance "no memory growth over a 10-minute run":
// -soak 10m -concurrency 32) then runs the proxy alone, uncontended, with
// -soak-workers workers for that long, before the idle-connection figure. It
// samples every twentieth of the run, at least a second apart: the proxy's
// RSS (when the bench started it), its goroutines and heap in use after a
// GC the sample forces (when its pprof address is known; the started proxy
// always serves it with -soak), and each interval's cycles/s. A verdict line compares the first sample
// after the first 10% (warm-up) with the last; -json has it all under "soak".
//
// -sessions N (for issue 17's "10,000 session locks on one proxy") runs the
// session bench instead of the table: it opens N connections to the proxy,
// measures -duration of them idle, takes a session-bound lock on each (SET
// k token NX, no TTL), waits a lease, and measures -duration again: the
// proxy's CPU, the renewals it made per second, the scripts each backend
// ran per second (INFO commandstats) and so the locks renewed per script,
// the late renewals and the losses, against the budget of one renewal per
// lock every third of the lease. Give the lease with -proxy-args
// "-session-lease 10s" (the default).
//
// -open-loop RATES (for issue 20's open-loop latency, e.g. -open-loop
// 1000,5000,10000,20000) runs the open-loop bench instead of the table:
// lock cycles offered at each rate, one due every 1/rate on a key of its
// own whatever the replies' pace, the systems in turns for -rounds rounds
// of -duration. An acquisition's latency counts from its due time, not
// from when it was sent, so a system that falls behind shows it in its
// tail (no coordinated omission). It prints cycles done per second, the
// cycles missed (due while 4,096 were under way), p50, p99 and p99.9, and
// the proxy's and the backends' CPU per cycle at each rate; and whether
// the proxy's p99 at 5,000/s is at most redsync's.
//
// Files: main.go (flags, starting the proxy and the systems, the run),
// systems.go (the systems compared: the proxy, redsync, a single Redis),
// load.go (closed-loop load and its latency samples), floor.go (the bare
// socket work of a cycle, the floor the table compares with), openloop.go,
// sessions.go, waiting.go and soak.go (the other benches), memory.go (idle
// connections' memory), cpu.go (CPU from /proc), backendstats.go (the
// backends' commands and the notices), costtable.go (-cost-table's builds
// and table), pprof.go (the proxy's profiles), procs.go (the processes it
// starts), report.go (the figures and the printed tables).
//
// It builds on Linux alone: its CPU figures come from /proc, its children
// die with it through Pdeathsig, and its floor and open-loop pacing use
// Linux's socket flags and prctl. The proxy itself builds everywhere.
package main
