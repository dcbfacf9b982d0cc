package quorum

import (
	"regexp"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/admit"
)

// TestInitScript: lua/init.lua writes the record and a marker that names
// the server's process with no wait only on a fresh data set, checked
// again atomically with the write: no record, no horizon, and no marker
// but one that a greeting of this process wrote where there was none, or
// an init of it. The engine then counts the server at once, restart
// quarantine and all.
func TestInitScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	runID := regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(c.Info(ctx, "server").Val())[1]
	set := admit.NewSet(1, []string{srv.Addr() + "/0"}, "")
	record := admit.Final(set).String()
	for _, tc := range []struct {
		name  string
		keys  map[string]string
		found string // "" where it writes
	}{
		{"fresh", nil, ""},
		{"greeted fresh", map[string]string{markerKey: runID + ":1000:unmarked"}, ""},
		{"an init of this process", map[string]string{markerKey: runID + ":1000:init"}, ""},
		{"a restart seen", map[string]string{markerKey: runID + ":1000:restart"}, "a marker: " + runID + ":1000:restart"},
		{"an earlier version's marker", map[string]string{markerKey: runID + ":1000"}, "a marker: " + runID + ":1000"},
		{"an earlier process", map[string]string{markerKey: "0123abcd:1000:unmarked"}, "a marker: 0123abcd:1000:unmarked"},
		{"a record", map[string]string{setKey: "1:3:abcd:-"}, "a backend set record: 1:3:abcd:-"},
		{"a horizon", map[string]string{horizonKey: "99999999999999"}, "a lease horizon: 99999999999999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.FlushAll(ctx)
			for k, v := range tc.keys {
				c.Set(ctx, k, v, 0)
			}
			got, err := c.Eval(ctx, luaSource("init"), []string{setKey, markerKey, horizonKey}, record).Text()
			if err != nil || got != tc.found {
				t.Fatalf("init.lua: %q, %v; want %q", got, err, tc.found)
			}
			marker := admit.ParseMarker(c.Get(ctx, markerKey).Val())
			written := c.Get(ctx, setKey).Val() == record
			if written != (tc.found == "") {
				t.Errorf("record %q", c.Get(ctx, setKey).Val())
			}
			if tc.found == "" && (marker.Owner != runID || marker.Reason != admit.ReasonInit || marker.Until > c.Time(ctx).Val().UnixMilli()) {
				t.Errorf("marker %+v, want one of %s, reason init, no wait", marker, runID)
			}
			if want := tc.keys[markerKey]; tc.found != "" && c.Get(ctx, markerKey).Val() != want {
				t.Errorf("marker %q after a refusal, was %q", c.Get(ctx, markerKey).Val(), want)
			}
		})
	}

	// The marker init leaves is kept by every greeting of the process, and
	// lets the engine count the server at once, though it started just now.
	c.FlushAll(ctx)
	if _, err := c.Eval(ctx, luaSource("init"), []string{setKey, markerKey, horizonKey}, record).Text(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Config{Backends: []string{srv.URL()}, NodeTimeout: defaultMaxTTL / 60})
	if b := e.Backends()[0]; b.State != StateUp {
		t.Fatalf("after init: %s for %v, want up", b.State, b.QuarantineLeft)
	}
	if _, err := e.acquire(ctx, uniqueKey(t), "me", defaultMaxTTL/60); err != nil {
		t.Errorf("acquire after init: %v", err)
	}
	if m := c.Get(ctx, markerKey).Val(); !strings.HasPrefix(m, runID+":") || !strings.HasSuffix(m, ":init") {
		t.Errorf("marker %q after the engine's greeting", m)
	}
}
