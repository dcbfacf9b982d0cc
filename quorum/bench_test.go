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
