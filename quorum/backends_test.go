package quorum

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
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
	// At start, one line for the three.
	connected := "msg=\"backend connected\" backends=" + c.servers[0].Addr() + "," + c.servers[1].Addr() + "," + c.servers[2].Addr() + " run_id="
	if n := strings.Count(text, "backend connected"); n != 1 || !strings.Contains(text, connected) {
		t.Errorf("%d lines say a backend connected, want 1 with %s:\n%s", n, connected, text)
	}
	if n := strings.Count(text, "backend unreachable"); n != 1 {
		t.Errorf("%d lines say a backend is unreachable, want 1:\n%s", n, text)
	}
}

// TestBackendMistakes: a backend URL that reaches something other than
// Redis, or that Redis refuses to authenticate, is told as such, with its
// own failure kind, in one log line naming the backend and what to check;
// the two good backends still make a quorum.
func TestBackendMistakes(t *testing.T) {
	guarded := redistest.Start(t)
	setup := guarded.Client(t)
	if err := setup.Do(t.Context(), "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := setup.ConfigSet(t.Context(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	webAddr := strings.TrimPrefix(web.URL, "http://")
	sshAddr := banner(t, "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")

	for _, tc := range []struct {
		name, url, kind, log string
	}{
		{"HTTP server", "redis://" + webAddr, KindNotRedis,
			`backend ` + webAddr + ` did not answer as Redis (its first bytes: \"HTTP/1.1 400 Bad Request\"): is this a Redis port?`},
		{"SSH server", "redis://" + sshAddr, KindNotRedis,
			`backend ` + sshAddr + ` did not answer as Redis (its first bytes: \"SSH-2.0-OpenSSH_9.2p1 Debian-2\"): is this a Redis port?`},
		{"wrong password", "redis://:guess@" + guarded.Addr(), KindAuth,
			`authentication failed on backend ` + guarded.Addr() + ` as user \"default\" (its URL names no user): check the password in its URL (WRONGPASS invalid username-password pair or user is disabled.)`},
		{"wrong user", "redis://nobody:app-pw@" + guarded.Addr(), KindAuth,
			`authentication failed on backend ` + guarded.Addr() + ` as user \"nobody\": check the user and password in its URL (WRONGPASS invalid username-password pair or user is disabled.)`},
		{"no password", "redis://" + guarded.Addr(), KindAuth,
			`authentication failed on backend ` + guarded.Addr() + `: it requires a password and its URL gives none (NOAUTH Authentication required.); give one as redis://user:password@host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Their own: a backend set is recorded in every backend's data.
			good := redistest.StartN(t, 2)
			var logged syncBuffer
			cfg := Config{
				Backends:                 []string{good[0].URL(), good[1].URL(), tc.url},
				DisableRestartQuarantine: true,
				NodeTimeout:              time.Second,
				Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
			}
			recordSet(t, cfg, good...)
			e := newEngine(t, cfg)
			if _, err := e.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second); err != nil {
				t.Fatalf("acquire on the two good backends: %v", err)
			}
			waitFor(t, func() bool { return e.Backends()[2].Failures[tc.kind] > 0 })
			if st := e.Backends()[2]; st.State != StateDown || st.LastError != tc.kind {
				t.Errorf("state %s, last error %q; want down, %q", st.State, st.LastError, tc.kind)
			}
			want := `level=ERROR msg="` + tc.log + `; it does not count toward quorum until this is fixed"`
			if n := strings.Count(logged.String(), want); n != 1 {
				t.Errorf("%d log lines start with\n%s\nin\n%s", n, want, logged.String())
			}
			if strings.Contains(logged.String(), "bad reply type") || strings.Contains(logged.String(), "unreachable") {
				t.Errorf("the log still says it in the old words:\n%s", logged.String())
			}
			// What /readyz shows as the backend's detail.
			if got, exp := e.Probe(t.Context())[2].Err.Error(), strings.ReplaceAll(tc.log, `\"`, `"`); got != exp {
				t.Errorf("Probe:\n got %s\nwant %s", got, exp)
			}
		})
	}
}

// banner serves a protocol that speaks first, as SSH does: each connection
// gets text, and is closed once the client is done.
func banner(t *testing.T, text string) string {
	return redistest.Serve(t, func(c net.Conn) {
		defer c.Close()
		c.Write([]byte(text))
		io.Copy(io.Discard, c)
	})
}
