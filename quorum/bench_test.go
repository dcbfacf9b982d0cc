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
// per lock cycle, allocations included (go test -bench . -benchmem).
func BenchmarkLockCycle(b *testing.B) {
	var backends []string
	for _, s := range redistest.StartN(b, 5) {
		backends = append(backends, s.URL())
	}
	e, err := New(Config{Backends: backends, DisableRestartQuarantine: true, NodeTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench:%d", worker.Add(1))
		for pb.Next() {
			if _, err := e.acquire(b.Context(), key, "tok", 10*time.Second); err != nil {
				b.Fatal(err)
			}
			if _, err := e.release(b.Context(), key, "tok"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
