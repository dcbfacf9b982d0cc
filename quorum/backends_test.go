package quorum

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBackendStates: Backends reports each backend's connection, counters
// and last failure, and each change of state is logged once.
func TestBackendStates(t *testing.T) {
	var logged syncBuffer
	c := newCluster(t, 3, Config{
		DisableRestartQuarantine: true,
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	})
	for _, st := range c.engine.Backends() {
		if st.State != StateUp || st.Replies != 0 {
			t.Fatalf("connected by New, before any request: %+v", st)
		}
	}
	c.servers[2].Kill()
	// Until the engine has seen the connection close, a request may still
	// be written on it and fail as "closed": wait for that, so that each of
	// the five meets a refused dial.
	waitFor(t, func() bool {
		return c.engine.Backends()[2].State == StateDown && strings.Contains(logged.String(), "backend unreachable")
	})
	for range 5 {
		if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second); err != nil {
			t.Fatalf("acquire: %v", err)
		}
	}
	// Each acquisition answers with the quorum of the two live backends; the
	// refusal of the killed one is recorded as it completes, maybe after.
	waitFor(t, func() bool { return c.engine.Backends()[2].Failures[KindRefused] >= 5 })
	states := c.engine.Backends()
	for i, st := range states[:2] {
		if st.State != StateUp || st.Replies != 5 || st.LastError != "" {
			t.Errorf("backend %d: %+v; want up with 5 replies", i, st)
		}
	}
	if st := states[2]; st.State != StateDown || st.LastError != KindRefused || st.Failures[KindRefused] != 5 || st.Replies != 0 {
		t.Errorf("killed backend: %+v; want down with 5 refusals", st)
	}
	text := logged.String()
	if n := strings.Count(text, "backend connected"); n != 3 {
		t.Errorf("%d lines say a backend connected, want 3:\n%s", n, text)
	}
	if n := strings.Count(text, "backend unreachable"); n != 1 {
		t.Errorf("%d lines say a backend is unreachable, want 1:\n%s", n, text)
	}
}
