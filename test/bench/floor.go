package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// floor is what the bare socket work of a lock cycle costs on this
// machine, whoever does it: one Go goroutine with plain connections and no
// Redis client library, sending PING. A proxy's lock operation is at least
// one round trip with its client and one fan-out to every backend, so its
// CPU per cycle cannot be below 2 × (RoundTripCPU + FanOutCPU) and its
// acquire latency not below RoundTrip + FanOut; what the proxy spends
// above that is its own.
type floor struct {
	// One PING and its reply on one connection to the first backend.
	RoundTripCPU float64 `json:"round_trip_cpu_us"`
	RoundTrip    float64 `json:"round_trip_p50_us"`
	// A PING written to every backend, then every reply read.
	FanOutCPU float64 `json:"fan_out_cpu_us"`
	FanOut    float64 `json:"fan_out_p50_us"`
	// The bounds above, per lock cycle and per acquisition.
	CycleCPU   float64 `json:"cycle_cpu_us"`
	AcquireP50 float64 `json:"acquire_p50_us"`
}

// floorSamples is how many round trips and fan-outs each measures: some
// seconds' worth, enough for a steady median.
const floorSamples = 5000

func measureFloor(ctx context.Context, backends []string) (*floor, error) {
	var d net.Dialer
	conns := make([]net.Conn, len(backends))
	readers := make([]*bufio.Reader, len(backends))
	for i, addr := range backends {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
		defer c.Close()
		conns[i], readers[i] = c, bufio.NewReader(c)
	}
	ping := []byte("*1\r\n$4\r\nPING\r\n")
	roundTrip := func(i int) error {
		if _, err := conns[i].Write(ping); err != nil {
			return err
		}
		_, err := readers[i].ReadSlice('\n')
		return err
	}
	// sample runs step floorSamples times: its CPU per step and median.
	sample := func(step func() error) (cpu, p50 float64, err error) {
		walls := make([]time.Duration, floorSamples)
		cpu0 := selfCPU()
		for i := range walls {
			start := time.Now()
			if err := step(); err != nil {
				return 0, 0, fmt.Errorf("floor: %w", err)
			}
			walls[i] = time.Since(start)
		}
		cpu = float64((selfCPU() - cpu0).Microseconds()) / floorSamples
		slices.Sort(walls)
		return cpu, float64(walls[len(walls)/2].Nanoseconds()) / 1e3, nil
	}
	f := &floor{}
	var err error
	if f.RoundTripCPU, f.RoundTrip, err = sample(func() error { return roundTrip(0) }); err != nil {
		return nil, err
	}
	if f.FanOutCPU, f.FanOut, err = sample(func() error {
		for _, c := range conns {
			if _, err := c.Write(ping); err != nil {
				return err
			}
		}
		for _, r := range readers {
			if _, err := r.ReadSlice('\n'); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	f.CycleCPU = 2 * (f.RoundTripCPU + f.FanOutCPU)
	f.AcquireP50 = f.RoundTrip + f.FanOut
	return f, nil
}

func (f *floor) print(out io.Writer, backends int) {
	fmt.Fprintf(out, "\nFloor: the bare socket work of a proxied lock cycle on this machine (one goroutine, plain connections, PING)\n")
	fmt.Fprintf(out, "  one round trip: %.1f µs CPU, p50 %.0f µs; a fan-out to all %d backends: %.1f µs CPU, p50 %.0f µs\n",
		f.RoundTripCPU, f.RoundTrip, backends, f.FanOutCPU, f.FanOut)
	fmt.Fprintf(out, "  so a proxy's lock cycle needs at least %.0f µs of CPU (2 × both) and its acquisition at least %.0f µs (one of each)\n",
		f.CycleCPU, f.AcquireP50)
}
