package quorum

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
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
		for _, r := range e.Renew(b.Context(), time.Minute, locks) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	perLock := float64(b.N * len(locks))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perLock, "ns/lock")
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() { e.Renew(b.Context(), time.Minute, locks) }))/float64(len(locks)), "allocs/lock")
}
