package quorum

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// BenchmarkLockCycle measures one acquire and release through the engine
// over 5 real backends, each goroutine on its own key: the engine's cost
// per lock cycle, allocations included (go test -bench . -benchmem). The
// fenced and plain engines share the backends and take turns in each
// sub-benchmark's runs, so -count N compares them under the same drift.
func BenchmarkLockCycle(b *testing.B) {
	var backends []string
	for _, s := range redistest.StartN(b, 5) {
		backends = append(backends, s.URL())
	}
	for _, fencing := range []bool{false, true} {
		name := "plain"
		if fencing {
			name = "fenced"
		}
		e, err := New(Config{Backends: backends, DisableRestartQuarantine: true, NodeTimeout: time.Second, Fencing: fencing})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		b.Run(name, func(b *testing.B) {
			var worker atomic.Int64
			before := e.Fences()
			b.ReportAllocs()
			b.SetParallelism(16) // the bench's 32 workers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:%s:%d", name, worker.Add(1))
				for pb.Next() {
					if _, err := e.acquire(b.Context(), key, "tok", 10*time.Second); err != nil {
						b.Fatal(err)
					}
					if _, err := e.release(b.Context(), key, "tok"); err != nil {
						b.Fatal(err)
					}
				}
			})
			// Write-backs are the extra round trip of fencing: the share of
			// acquisitions that needed one.
			if after := e.Fences(); after.Minted > before.Minted {
				b.ReportMetric(float64(after.WriteBacks-before.WriteBacks)/float64(after.Minted-before.Minted), "writebacks/acquire")
			}
		})
	}
}

// BenchmarkRenew measures renewing 10,000 locks in one call over 3 real
// backends, a session-lock manager's round: the cost per lock, allocations
// included, is the ns/lock and allocs/lock metrics.
func BenchmarkRenew(b *testing.B) {
	servers := redistest.StartN(b, 3)
	var backends []string
	locks := make([]Held, 10000)
	for i := range locks {
		locks[i] = Held{Key: fmt.Sprintf("bench:renew:%d", i), Token: fmt.Sprintf("session%d", i)}
	}
	for _, s := range servers {
		backends = append(backends, s.URL())
		pipe := s.Client(b).Pipeline()
		for _, l := range locks {
			pipe.Set(b.Context(), l.Key, l.Token, time.Minute)
		}
		if _, err := pipe.Exec(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	e, err := New(Config{Backends: backends, DisableRestartQuarantine: true, NodeTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range e.Renew(b.Context(), Renewal{TTL: time.Minute, Locks: locks}) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	perLock := float64(b.N * len(locks))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perLock, "ns/lock")
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() { e.Renew(b.Context(), Renewal{TTL: time.Minute, Locks: locks}) }))/float64(len(locks)), "allocs/lock")
}

// BenchmarkBackendCost measures what a lock cycle costs one backend, in
// the server's own CPU (INFO cpu) per cycle: the engine's two scripts
// (acquire with the backend-set check and the expiry stamp, release with
// its notice) against those of aa005f6 a wave ago (the stamp alone, then
// a compare-and-delete script), the single-Redis recipe (SET NX PX, then
// that script) and plain SET NX PX and DEL, which keep neither the set
// check nor an exact rollback. Lone: one cycle at a
// time, each request its own read and write on the server; pipelined:
// 32 cycles at once through one connection, as the engine sends them
// under load.
func BenchmarkBackendCost(b *testing.B) {
	srv := redistest.Start(b)
	info := srv.Client(b)
	const set = "epoch:1:bench:"
	if err := info.Set(b.Context(), "{lockproxy}:set", set, 0).Err(); err != nil {
		b.Fatal(err)
	}
	compareAndDelete := backend.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	// The acquisition of aa005f6, a wave ago: the stamp, without the set
	// check and the horizon.
	stampOnly := backend.NewScript(`if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2]) then return redis.call("pexpiretime", KEYS[1]) end return 0`)
	pipe, err := backend.New(backend.Config{URL: srv.URL(), Timeout: time.Second,
		Scripts: []*backend.Script{acquireScript, plainValues.release, compareAndDelete, stampOnly}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pipe.Close() })
	serverCPU := func() time.Duration {
		s, err := info.Info(b.Context(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		var total time.Duration
		for _, line := range strings.Split(s, "\r\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				secs, _ := strconv.ParseFloat(v, 64)
				total += time.Duration(secs * float64(time.Second))
			}
		}
		return total
	}
	cycles := map[string]func(key string) [2]*backend.Command{
		"scripts": func(key string) [2]*backend.Command {
			return [2]*backend.Command{
				backend.ScriptCommand(acquireScript, []string{key}, "tok", 10000, set),
				backend.ScriptCommand(plainValues.release, []string{key}, "tok", newReleaseID()),
			}
		},
		"recipe": func(key string) [2]*backend.Command {
			return [2]*backend.Command{
				backend.KeyCommand("SET", key, "tok", "NX", "PX", 10000),
				backend.ScriptCommand(compareAndDelete, []string{key}, "tok"),
			}
		},
		"stamp": func(key string) [2]*backend.Command {
			return [2]*backend.Command{
				backend.ScriptCommand(stampOnly, []string{key}, "tok", 10000),
				backend.ScriptCommand(compareAndDelete, []string{key}, "tok"),
			}
		},
		"plain": func(key string) [2]*backend.Command {
			return [2]*backend.Command{backend.KeyCommand("SET", key, "tok", "NX", "PX", 10000), backend.KeyCommand("DEL", key)}
		},
	}
	measure := func(b *testing.B, name string, workers int) {
		cycle := func(key string) {
			for i, cmd := range cycles[name](key) {
				r, err := pipe.Do(b.Context(), cmd)
				if err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					continue
				}
				// The acquisition's answer: a stamp, or +OK; 0 or nil if held.
				if stamp, err := r.Integer(); r.IsNil() || err == nil && stamp == 0 {
					b.Fatalf("%s: the key was held", key)
				}
			}
		}
		var worker atomic.Int64
		before := serverCPU()
		if workers == 1 {
			for b.Loop() {
				cycle("cost:" + name)
			}
		} else {
			b.SetParallelism(max(1, workers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("cost:%s:%d", name, worker.Add(1))
				for pb.Next() {
					cycle(key)
				}
			})
		}
		b.ReportMetric(float64((serverCPU()-before).Nanoseconds())/1e3/float64(b.N), "server-µs/cycle")
	}
	for _, depth := range []struct {
		name    string
		workers int
	}{{"lone", 1}, {"pipelined", 32}} {
		for _, name := range []string{"scripts", "stamp", "recipe", "plain"} {
			b.Run(depth.name+"/"+name, func(b *testing.B) { measure(b, name, depth.workers) })
		}
	}
	// The same two scripts while the server holds every script of the
	// engine, as each backend did when every connection's greeting loaded
	// them all: Redis steps Lua's collector every 50 script runs, and what
	// it walks grows with the scripts held. Last, as nothing unloads them.
	for _, s := range allScripts {
		if err := info.ScriptLoad(b.Context(), s.Source()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pipelined/scripts-all-held", func(b *testing.B) { measure(b, "scripts", 32) })
}
