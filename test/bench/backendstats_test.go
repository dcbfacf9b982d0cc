//go:build linux

package main

import (
	"math"
	"testing"
)

// A Redis 7 INFO commandstats, as the bench reads it from a backend.
const commandStatsInfo = "# Commandstats\r\n" +
	"cmdstat_evalsha:calls=200,usec=3000,usec_per_call=15.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_get:calls=100,usec=50,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_set:calls=100,usec=120,usec_per_call=1.20,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_publish:calls=100,usec=300,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|setinfo:calls=2,usec=4,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=7,usec=700,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_hello:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n"

func TestParseCommandStats(t *testing.T) {
	got := parseCommandStats(commandStatsInfo)
	want := commandStats{
		"evalsha": {200, 3000}, "get": {100, 50}, "set": {100, 120}, "publish": {100, 300},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %v, want %v (the bench's own info, hello and client|setinfo left out)", got, want)
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: %+v, want %+v", name, got[name], v)
		}
	}
}

func TestReleaseNotices(t *testing.T) {
	n, ok := releaseNotices("# Waits\r\nwaiters:0\r\nwait_wake_ups:3\r\nrelease_notices:1234\r\nwait_releases:5\r\n")
	if !ok || n != 1234 {
		t.Errorf("release_notices: %d, %v; want 1234, true", n, ok)
	}
	// A build from before the notices says nothing: unknown, not zero.
	if _, ok := releaseNotices("# Waits\r\nwaiters:0\r\n"); ok {
		t.Error("an INFO without release_notices read as known")
	}
}

// TestBackendPerCycle takes two rounds of readings around 100 cycles each
// over 5 backends and checks every per-cycle figure.
func TestBackendPerCycle(t *testing.T) {
	var w backendWork
	round := func(before, after backendReading) { w.add(after.sub(before)) }
	start := backendReading{stats: commandStats{"evalsha": {1000, 9000}, "set": {10, 5}}, notices: 40, known: true}
	mid := backendReading{stats: commandStats{
		"evalsha": {1000 + 5*200, 9000 + 5*1500}, "set": {10 + 5*100, 5 + 500},
		"get": {5 * 100, 250}, "publish": {5 * 100, 800},
		"ping": {1, 1}, // a health check: counted, though below the breakdown's cut
	}, notices: 40 + 100, known: true}
	// In the second round the other systems' proxies sent nothing, and
	// this one received a notice per cycle again.
	end := backendReading{stats: commandStats{
		"evalsha": {1000 + 5*400, 9000 + 5*3000}, "set": {10 + 5*200, 5 + 1000},
		"get": {5 * 200, 500}, "publish": {5 * 200, 1600}, "ping": {1, 1},
	}, notices: 40 + 200, known: true}
	round(start, mid)
	round(mid, end)

	p := w.perCycle(200, 5)
	if p == nil {
		t.Fatal("no figures for 200 cycles")
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	near("commands per backend", p.Commands, 2+1+1+1+1.0/1000)
	near("evalsha per backend", p.ByCommand["evalsha"], 2)
	near("script µs, all backends", p.ScriptUs, 5*3000.0/200)
	near("notices sent", p.NoticesSent, 5)
	if p.NoticesReceived == nil {
		t.Fatal("notices received unknown")
	}
	near("notices received", *p.NoticesReceived, 1)
	if got, want := p.breakdown(), "evalsha 2, get 1, publish 1, set 1"; got != want {
		t.Errorf("breakdown %q, want %q", got, want)
	}

	// One reading without release_notices makes the whole figure unknown.
	w.add(backendReading{stats: commandStats{}, known: true}.sub(backendReading{stats: commandStats{}}))
	if p := w.perCycle(200, 5); p == nil || p.NoticesReceived != nil {
		t.Errorf("notices received after an unknown reading: %+v, want null", p)
	}
	if p := w.perCycle(0, 5); p != nil {
		t.Errorf("figures for no cycles: %+v", p)
	}
	if p := (backendWork{}).perCycle(200, 5); p != nil {
		t.Errorf("figures without a reading: %+v", p)
	}
}

// TestCommandStatsReset: counters that went down (CONFIG RESETSTAT in
// between) count as nothing rather than as negative work.
func TestCommandStatsReset(t *testing.T) {
	d := commandStats{"get": {3, 1}}.sub(commandStats{"get": {100, 50}, "set": {5, 5}})
	if len(d) != 0 {
		t.Errorf("after a reset: %v, want nothing", d)
	}
}

func TestHundredths(t *testing.T) {
	for v, want := range map[float64]string{2: "2", 1.5: "1.5", 1.0 / 3: "0.33", 0.999: "1", 6.004: "6"} {
		if got := hundredths(v); got != want {
			t.Errorf("hundredths(%v) = %q, want %q", v, got, want)
		}
	}
}
