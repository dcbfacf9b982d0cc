//go:build linux

package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

func table(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
}

func printHeld(out io.Writer, h *heldResult) {
	fmt.Fprintf(out, "\n== Held locks: %d locks, %d groups ==\n", h.Locks, h.Groups)
	fmt.Fprintf(out, "taken in %.2fs (%.0f locks/s, pipelined)\n", h.Seconds, h.LocksPerSecond)
	fmt.Fprintf(out, "proxy RSS, all proxies: %d -> %d bytes, %.1f bytes per held lock\n",
		h.ProxyRSSBefore, h.ProxyRSSAfter, h.ProxyRSSPerLock)
	if h.ProxyHeapPerLock != nil {
		fmt.Fprintf(out, "proxy live Go heap after GC, all proxies: %.0f -> %.0f bytes, %.2f bytes per held lock\n",
			*h.ProxyHeapBefore, *h.ProxyHeapAfter, *h.ProxyHeapPerLock)
	}
	fmt.Fprintln(out, "  (~0 expected: the proxy keeps no lock state, the locks live in the backends; RSS growth is")
	fmt.Fprintln(out, "   pipeline buffers and garbage the Go runtime has not returned to the system)")
	w := table(out)
	fmt.Fprintln(w, "group\tbackend\taddress\tlock keys\tused_memory before\tafter\tbytes per lock\t")
	for _, b := range h.Backends {
		fmt.Fprintf(w, "%d\t%d\t%s\t%d\t%d\t%d\t%.1f\t\n", b.Group, b.Index, b.Addr, b.Keys, b.UsedMemoryBefore, b.UsedMemoryAfter, b.BytesPerLock)
	}
	w.Flush()
	perIndex := map[int]int64{}
	for _, b := range h.Backends {
		perIndex[b.Index] += b.Keys
	}
	fmt.Fprint(out, "keys summed over groups, by backend index:")
	for i := range backendsPerGrp {
		fmt.Fprintf(out, " [%d] %d", i, perIndex[i])
	}
	fmt.Fprintf(out, " (of %d locks)\n", h.Locks)
}

func printConns(out io.Writer, c *connResult) {
	fmt.Fprintf(out, "\n== Connections: %d idle client connections ==\n", c.Conns)
	fmt.Fprintf(out, "opened and PINGed in %.2fs\n", c.Seconds)
	fmt.Fprintf(out, "proxy RSS, all proxies: %d -> %d bytes, %.0f bytes per connection\n",
		c.ProxyRSSBefore, c.ProxyRSSHeld, c.ProxyRSSPerConn)
	if c.ProxyHeapPerConn != nil {
		fmt.Fprintf(out, "proxy live Go heap after GC, all proxies: %.0f -> %.0f bytes, %.0f bytes per connection\n",
			*c.ProxyHeapBefore, *c.ProxyHeapHeld, *c.ProxyHeapPerConn)
	}
	if c.GoroutinesPerConn != nil {
		fmt.Fprintf(out, "goroutines, all proxies: %.0f -> %.0f, %.2f per connection\n",
			*c.GoroutinesBefore, *c.GoroutinesHeld, *c.GoroutinesPerConn)
	} else {
		fmt.Fprintln(out, "goroutines: the proxies' /metrics has no go_goroutines")
	}
	fmt.Fprintf(out, "proxies serving locks after the connections closed: %v\n", c.ServingAfterClose)
}

func printThroughput(out io.Writer, o *options, ts []throughputResult) {
	fmt.Fprintf(out, "\n== Throughput: %d workers, %d proxies, %d x %s rounds, median round ==\n",
		o.workers, o.proxies, o.rounds, o.duration)
	w := table(out)
	fmt.Fprintln(w, "groups\tbackends\tcycles/s\tproxy µs/cycle\tbackend µs/cycle\tclient µs/cycle\tmachine CPU busy %\t")
	for _, t := range ts {
		m := t.Median
		fmt.Fprintf(w, "%d\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%.0f\t\n", t.Groups, t.Backends, m.CyclesPerSecond, m.ProxyUS, m.BackendUS, m.ClientUS, m.MachineBusyPct)
	}
	w.Flush()
	for _, t := range ts {
		for i, r := range t.Rounds {
			if r.Errors > 0 || r.Contended > 0 {
				fmt.Fprintf(out, "groups %d round %d: %d cycles, %d contended, %d errors %s\n", t.Groups, i+1, r.Cycles, r.Contended, r.Errors, r.FirstError)
			}
		}
	}
}
