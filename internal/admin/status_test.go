package admin

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// statusCluster is a proxy over real redis-servers with its status page
// served, as main serves it, by Handler on an HTTP server of its own.
type statusCluster struct {
	servers []*redistest.Server
	page    *StatusPage
	client  *redis.Client
	url     string // the ops handler's base URL
}

func startStatusCluster(t *testing.T, n int) *statusCluster {
	t.Helper()
	c := &statusCluster{servers: redistest.StartN(t, n)}
	urls := make([]string, n)
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	groups, srv, addr := startProxy(t, urls, nil)
	c.client = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.client.Close() })
	c.page = &StatusPage{groups: groups, sampler: newOpsSampler(srv.Stats), log: slog.New(slog.DiscardHandler)}
	hs := httptest.NewServer(Handler(groups, c.page, false, false))
	t.Cleanup(hs.Close)
	c.url = hs.URL
	return c
}

// startProxy serves RESP, as main does, over the engine of the backends at
// urls, observed by obs when it is not nil, and returns its groups, its
// server and the address it listens on.
func startProxy(t *testing.T, urls []string, obs *Metrics) (*shard.Groups, *proxy.Server, string) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	// A generous backend timeout: a loaded machine running -race can take
	// longer than the default 50ms to dial.
	qc := quorum.Config{Backends: urls, NodeTimeout: time.Second, DisableRestartQuarantine: true, Logger: log}
	pc := proxy.Config{Logger: log, Version: testVersion}
	if obs != nil {
		qc.Observer, pc.Observer = obs, obs
	}
	engine, err := quorum.New(qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	groups, err := shard.New([]*quorum.Engine{engine})
	if err != nil {
		t.Fatal(err)
	}
	pc.Backends, pc.Watcher, pc.Lister = groups, groups, groups
	srv, err := proxy.New(groups, pc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return groups, srv, ln.Addr().String()
}

// get fetches path from the ops handler.
func (c *statusCluster) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(c.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

// backendRow matches a backend's row as the template writes it and as
// Chromium serialises it again.
var backendRow = regexp.MustCompile(`<tr data-backend="([^"]+)" data-state="([^"]+)">`)

// states reads the backends' states from a page, in order.
func states(page string) []string {
	var out []string
	for _, m := range backendRow.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1]+"="+m[2])
	}
	return out
}

// TestStatusPageHTTP: / is the page, exactly (other paths 404), an HTML page
// that runs no script, saying when no listing is wired, when quorum is lost,
// and bounding the lock sample whatever the lister returns.
func TestStatusPageHTTP(t *testing.T) {
	c := startStatusCluster(t, 3)

	code, h, body := c.get(t, "/")
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q", code, h.Get("Content-Type"))
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("Content-Security-Policy: %q", csp)
	}
	if strings.Contains(strings.ToLower(body), "<script") {
		t.Fatal("the page has a script")
	}
	for _, want := range []string{"Quorum available: 3 of 3 backends count, 2 needed", "Listing not available.", "Measuring"} {
		if !strings.Contains(body, want) {
			t.Fatalf("GET / lacks %q:\n%s", want, body)
		}
	}
	for _, srv := range c.servers {
		id := serverRunID(t, srv)
		if want := fmt.Sprintf(`data-run-id="%s" title="run_id %s">%s…<`, id, id, id[:8]); !strings.Contains(body, want) {
			t.Fatalf("GET / does not name %s's server %s:\n%s", srv.Addr(), id, body)
		}
	}
	for _, path := range []string{"/nope", "/index.html", "/status"} {
		if code, _, _ := c.get(t, path); code != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", path, code)
		}
	}

	rows := make([]heldLockRow, statusLocks+5)
	for i := range rows {
		rows[i] = heldLockRow{Key: fmt.Sprintf("job:%d", i), Owner: "w1", Left: 1500 * time.Millisecond, Present: []bool{true, false, true}}
	}
	rows[0].Key = "bin\x00\xff<b>"
	c.page.held = func(context.Context) []heldLockRow { return rows }
	c.servers[0].Kill()
	c.servers[1].Kill()
	_, _, body = c.get(t, "/")
	for _, want := range []string{
		"No quorum: 1 of 3 backends count, 2 needed",
		`<tr data-key="job:19">`, "The first 20 shown; more are held.",
		"1.5 s", "2 of 3",
		`&#34;bin\x00\xff&lt;b&gt;&#34;`, // quoted, then escaped
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("GET / with 2 of 3 backends down lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `data-key="job:20"`) {
		t.Fatal("the page shows more than statusLocks locks")
	}
	if exp, got := fmt.Sprint([]string{c.servers[0].Addr() + "=down", c.servers[1].Addr() + "=down", c.servers[2].Addr() + "=up"}), fmt.Sprint(states(body)); exp != got {
		t.Fatalf("backend states: want %s, got %s", exp, got)
	}
}

// TestStatusPageWaits: a waiting backend's row says what it waits for, in
// words, beside how long (the cases of TestReadyzWaits).
func TestStatusPageWaits(t *testing.T) {
	for _, tc := range waitCases {
		t.Run(tc.name, func(t *testing.T) {
			st := probedState(quorum.NodeStatus{Addr: "10.0.0.1:6379", Latency: 1200 * time.Microsecond, Err: tc.err}, tc.known)
			var page bytes.Buffer
			if err := statusTemplate.Execute(&page, statusView{HasQuorum: true, Backends: []backendView{backendViewOf(st, tc.known.ClockRate)}}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(page.String(), tc.row) {
				t.Errorf("the page lacks\n%s\n%s", tc.row, page.String())
			}
		})
	}
}

// TestOpsSampler: the rates are over the last opsWindow, not since start,
// by operation and outcome.
func TestOpsSampler(t *testing.T) {
	var st proxy.Stats
	s := newOpsSampler(func() proxy.Stats { return st })
	t0 := time.Now()
	if d, _ := s.rates(t0); d != 0 {
		t.Fatalf("rates before a sample: window %s", d)
	}
	// 100 acquisitions a second for 5 s, then 10 a second, 2 of them
	// refused, for 12 s.
	for i := range 18 {
		at := t0.Add(time.Duration(i) * time.Second)
		s.take(at)
		if i < 5 {
			st.Operations[quorum.OpAcquire][proxy.OutcomeAcquired] += 100
		} else {
			st.Operations[quorum.OpAcquire][proxy.OutcomeAcquired] += 8
			st.Operations[quorum.OpAcquire][proxy.OutcomeHeldElsewhere] += 2
		}
	}
	now := t0.Add(18 * time.Second)
	d, r := s.rates(now)
	if exp, got := opsWindow+time.Second, d; exp != got {
		t.Fatalf("window: want %s, got %s", exp, got)
	}
	if exp, got := 8.0, r[quorum.OpAcquire][proxy.OutcomeAcquired]; exp != got {
		t.Fatalf("acquired/s: want %v, got %v", exp, got)
	}
	if exp, got := 2.0, r[quorum.OpAcquire][proxy.OutcomeHeldElsewhere]; exp != got {
		t.Fatalf("held_elsewhere/s: want %v, got %v", exp, got)
	}
	if exp, got := 0.0, r[quorum.OpRelease][proxy.OutcomeOK]; exp != got {
		t.Fatalf("release/s: want %v, got %v", exp, got)
	}
	if n := len(s.samples); n > int(opsWindow/opsEvery)+1 {
		t.Fatalf("the sampler keeps %d samples", n)
	}
}

// TestStatusPageChromium renders the page in headless Chromium with one of
// three real backends down, and checks what it shows: the DOM names every
// backend with its state, and the screenshot has the asked size, is not
// blank, and shows the green of "up" and the red of "down".
func TestStatusPageChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v): the status page test renders the page in it; install Debian's chromium package: apt-get install -y chromium", err)
	}
	c := startStatusCluster(t, 3)
	c.page.sampler.take(time.Now())
	ctx := t.Context()
	for i := range 5 {
		if ok, err := c.client.SetNX(ctx, fmt.Sprintf("orders:%d", i), "worker-7", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX: %v %v", ok, err)
		}
	}
	if ok, err := c.client.SetNX(ctx, "orders:0", "worker-8", 30*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX of a held lock: %v %v", ok, err)
	}
	c.page.held = func(context.Context) []heldLockRow {
		return []heldLockRow{{Key: "orders:0", Owner: "worker-7", Left: 29 * time.Second, Present: []bool{true, true, false}}}
	}
	c.servers[2].Kill()
	down := c.servers[2].Addr() + "=down"
	redistest.Eventually(t, func() string {
		if _, _, body := c.get(t, "/"); !strings.Contains(fmt.Sprint(states(body)), down) || strings.Contains(body, "Measuring") {
			return "the page does not show the killed backend down with rates yet:\n" + body
		}
		return ""
	})

	dom := runChromium(t, bin, "--dump-dom", c.url+"/")
	if exp, got := fmt.Sprint([]string{c.servers[0].Addr() + "=up", c.servers[1].Addr() + "=up", down}), fmt.Sprint(states(dom)); exp != got {
		t.Fatalf("backend states in Chromium's DOM: want %s, got %s\n%s", exp, got, dom)
	}
	for _, want := range []string{"Quorum available: 2 of 3 backends count, 2 needed", `<tr data-op="acquire">`, "held_elsewhere", `<tr data-key="orders:0">`, "worker-7"} {
		if !strings.Contains(dom, want) {
			t.Fatalf("Chromium's DOM lacks %q:\n%s", want, dom)
		}
	}

	const width, height = 1200, 900
	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, bin, "--screenshot="+shot, fmt.Sprintf("--window-size=%d,%d", width, height), c.url+"/")
	img := readPNG(t, shot)
	if exp, got := image.Pt(width, height), img.Bounds().Size(); exp != got {
		t.Fatalf("screenshot size: want %v, got %v", exp, got)
	}
	green, red, ink := 0, 0, 0
	for y := range height {
		for x := range width {
			r, g, b, _ := img.At(x, y).RGBA()
			px := [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}
			switch {
			case near(px, [3]int{0x1a, 0x7f, 0x37}): // .s-up, the quorum banner
				green++
			case near(px, [3]int{0xcf, 0x22, 0x2e}): // .s-down
				red++
			}
			if px[0] < 200 || px[1] < 200 || px[2] < 200 {
				ink++
			}
		}
	}
	// One "down" badge is some 80×20 pixels, less its letters.
	if green < 3000 || red < 500 || ink < width*height/50 {
		t.Fatalf("screenshot %s: %d green, %d red, %d non-white pixels: the badges or the page did not render", shot, green, red, ink)
	}
}

// runChromium runs headless Chromium with args and returns what it writes
// to standard output. Its own profile directory keeps runs apart; the
// generous timeout is for its start on a loaded 2-core machine.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + dir}, args...)...)
	cmd.Env = append(cmd.Environ(), "HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(f))
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", path, err)
	}
	return img
}

// near reports whether two colours differ by at most a little in each
// channel, what antialiasing and colour management change.
func near(a, b [3]int) bool {
	for i := range a {
		if d := a[i] - b[i]; d < -12 || d > 12 {
			return false
		}
	}
	return true
}

// serverRunID is the run_id that srv's INFO server gives.
func serverRunID(t *testing.T, srv *redistest.Server) string {
	t.Helper()
	info, err := srv.Client(t).Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("INFO server gives no run_id:\n%s", info)
	}
	return m[1]
}
