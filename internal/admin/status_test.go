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
	"strconv"
	"strings"
	"sync/atomic"
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
	c.page = &StatusPage{groups: groups, sampler: newOpsSampler(srv.Stats), quorumSeen: make([]atomic.Bool, 1), log: slog.New(slog.DiscardHandler)}
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
	groups := oneGroup(t, qc)
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
	c.page.quorumSeen[0].Store(false) // as the view above found it
	if c.page.noteQuorum(); !c.page.quorumSeen[0].Load() {
		t.Error("Sample's note misses the quorum the group has: a later loss would read as a start's wait")
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
	c.page.held = func(context.Context) lockSample { return lockSample{Held: rows} }
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
	c.page.held = func(context.Context) lockSample {
		return lockSample{Held: []heldLockRow{{Key: "orders:0", Owner: "worker-7", Left: 29 * time.Second, Present: []bool{true, true, false}}}}
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

	img := screenshot(t, bin, c.url+"/")
	n := countColours(img, [3]int{0x1a, 0x7f, 0x37}, [3]int{0xcf, 0x22, 0x2e}) // .s-up and the quorum banner; .s-down
	// One "down" badge is some 80×20 pixels, less its letters.
	if n[0] < 3000 || n[1] < 500 || n[2] < shotWidth*shotHeight/50 {
		t.Fatalf("screenshot: %d green, %d red, %d non-white pixels: the badges or the page did not render", n[0], n[1], n[2])
	}
}

// TestStatusPageChromiumColdStart renders a cold start's page in headless
// Chromium: the DOM has the start-up note and the undecided locks, and the
// screenshot shows the note's blue and the undecided box's orange beside
// the red of no quorum.
func TestStatusPageChromiumColdStart(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v): the status page test renders the page in it; install Debian's chromium package: apt-get install -y chromium", err)
	}
	c := startColdCluster(t)
	redistest.Eventually(t, func() string {
		if _, _, body := c.get(t, "/"); !coldBanner.MatchString(body) {
			return "the page has no start-up note yet:\n" + body
		}
		return ""
	})

	dom := runChromium(t, bin, "--dump-dom", c.url+"/")
	for _, want := range []string{"No quorum: 0 of 3 backends count, 2 needed", coldUndecided, `<tr data-undecided="orders:9">`} {
		if !strings.Contains(dom, want) {
			t.Fatalf("Chromium's DOM lacks %q:\n%s", want, dom)
		}
	}
	if !coldBanner.MatchString(dom) {
		t.Fatalf("Chromium's DOM lacks the start-up note %s:\n%s", coldBanner, dom)
	}

	img := screenshot(t, bin, c.url+"/")
	n := countColours(img, [3]int{0xcf, 0x22, 0x2e}, [3]int{0xdd, 0xf4, 0xff}, [3]int{0xff, 0xf1, 0xe5}) // .banner.no, .banner.expected, .undecided
	// Each of the three is a full-width box some 40 pixels high.
	if n[0] < 20000 || n[1] < 20000 || n[2] < 20000 {
		t.Fatalf("screenshot: %d red, %d blue, %d orange pixels: the banner, the start-up note or the undecided locks did not render", n[0], n[1], n[2])
	}
}

// The size of a screenshot.
const shotWidth, shotHeight = 1200, 900

// screenshot is url as headless Chromium renders it, of the asked size.
func screenshot(t *testing.T, bin, url string) image.Image {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, bin, "--screenshot="+shot, fmt.Sprintf("--window-size=%d,%d", shotWidth, shotHeight), url)
	img := readPNG(t, shot)
	if exp, got := image.Pt(shotWidth, shotHeight), img.Bounds().Size(); exp != got {
		t.Fatalf("screenshot size: want %v, got %v", exp, got)
	}
	return img
}

// countColours counts img's pixels near each of colours, and then those
// that are not white: its ink.
func countColours(img image.Image, colours ...[3]int) []int {
	n := make([]int, len(colours)+1)
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			px := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			for i, c := range colours {
				if near(px, c) {
					n[i]++
					break
				}
			}
			if px[0] < 200 || px[1] < 200 || px[2] < 200 {
				n[len(colours)]++
			}
		}
	}
	return n
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

// startColdCluster starts three fresh redis-servers that already hold
// locks no proxy recorded (orders:0 to orders:2 everywhere, orders:9 on the
// first only) and a status page over an engine with the restart
// quarantine on, as main runs it: a cold start without lockproxy init,
// where every backend waits max_ttl and no lock can be decided.
func startColdCluster(t *testing.T) *statusCluster {
	t.Helper()
	c := &statusCluster{servers: redistest.StartN(t, 3)}
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.URL()
		for k := range 3 {
			if err := s.Client(t).Set(t.Context(), fmt.Sprintf("orders:%d", k), "worker-7", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.servers[0].Client(t).Set(t.Context(), "orders:9", "worker-9", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	groups := oneGroup(t, quorum.Config{Backends: urls, NodeTimeout: time.Second, MaxTTL: 90 * time.Second, Logger: log})
	c.page = NewStatusPage(groups, func() proxy.Stats { return proxy.Stats{} }, false, testVersion, log)
	hs := httptest.NewServer(Handler(groups, c.page, false, false))
	t.Cleanup(hs.Close)
	c.url = hs.URL
	return c
}

// coldBanner is the start-up note of a cold cluster's page: its wait is
// max_ttl's 90 s and the drift allowance, less what has passed. The end
// carries its date when it falls on another day (a start just before
// midnight UTC).
var coldBanner = regexp.MustCompile(`<div class="banner expected" data-startup="-1">Expected after a start: backends wait until the locks they may have held expire; quorum in (\d+) s \(at (?:\d{4}-\d\d-\d\d )?(\d\d:\d\d:\d\d) UTC\)\. Run <code>lockproxy init</code> on fresh backends to skip this\.</div>`)

// coldUndecided is what a cold cluster's page says of its locks: the four
// keys, undecided, none of them claimed held.
const coldUndecided = `<p class="undecided" id="undecided">4 locks undecided: no quorum answers, so whether they are held cannot be told; lock commands on them answer NOQUORUM.</p>`

// TestStatusPageColdStart: on a cold start over backends that hold locks,
// the page says that the red banner is the wait of a start and when it
// ends, and lists the locks as undecided, never "No locks held"; once a
// group had a quorum, its losing it again is not a start's.
func TestStatusPageColdStart(t *testing.T) {
	c := startColdCluster(t)
	var body string
	redistest.Eventually(t, func() string {
		if _, _, body = c.get(t, "/"); !strings.Contains(body, `data-state="quarantined"`) || strings.Contains(body, `data-state="up"`) {
			return "the backends are not all quarantined yet:\n" + body
		}
		return ""
	})
	m := coldBanner.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the page lacks the start-up note %s:\n%s", coldBanner, body)
	}
	if in, _ := strconv.Atoi(m[1]); in < 60 || in > 92 {
		t.Errorf("quorum expected in %d s, want the 90 s max_ttl and its drift, less start-up", in)
	}
	for _, want := range []string{
		"No quorum: 0 of 3 backends count, 2 needed",
		coldUndecided,
		`<tr data-undecided="orders:9"><td class="mono">orders:9</td><td class="mono">worker-9</td><td><span class="seen" title="` + c.servers[0].Addr() + `">●</span><span class="dim" title="` + c.servers[1].Addr() + `">○</span><span class="dim" title="` + c.servers[2].Addr() + `">○</span> 1 of 3</td></tr>`,
		`<tr data-undecided="orders:0"><td class="mono">orders:0</td><td class="mono">worker-7</td><td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks\n%s\n%s", want, body)
		}
	}
	for _, wrong := range []string{"No locks held", `<table id="locks">`} {
		if strings.Contains(body, wrong) {
			t.Errorf("the page claims %q of undecided locks:\n%s", wrong, body)
		}
	}

	if c.page.noteQuorum(); c.page.quorumSeen[0].Load() {
		t.Error("Sample's note takes a group without a quorum for one that had it")
	}
	c.page.quorumSeen[0].Store(true) // as Sample notes a quorum had since
	if _, _, body = c.get(t, "/"); strings.Contains(body, "Expected after a start") {
		t.Errorf("a quorum lost after it was had is shown as a start's wait:\n%s", body)
	}
}

// TestStatusPageStartupNote: the start-up note of each group whose quorum
// the ends of waits will bring, exactly, and none where a quorum was had,
// is there, or needs a backend that is down.
func TestStatusPageStartupNote(t *testing.T) {
	now := time.Date(2026, 11, 28, 17, 2, 30, 0, time.UTC)
	wait := func(left float64, reason string) backendState {
		return backendState{State: "quarantined", QuarantineLeftS: left, Reason: reason}
	}
	up, down := backendState{State: "up"}, backendState{State: "down"}
	epoch := backendState{State: "epoch_wait", QuarantineLeftS: 12, Reason: "epoch"}
	inGroup := func(g int, states ...backendState) []backendState {
		for i := range states {
			states[i].Group = &g
		}
		return states
	}
	for _, tc := range []struct {
		name    string
		states  []backendState
		quorums []int
		seen    bool
		want    string
	}{
		{name: "fresh", states: []backendState{wait(59, "unmarked"), wait(42, "unmarked"), wait(61, "unmarked")}, quorums: []int{2},
			want: `<div class="banner expected" data-startup="-1">Expected after a start: backends wait until the locks they may have held expire; quorum in 59 s (at 17:03:29 UTC). Run <code>lockproxy init</code> on fresh backends to skip this.</div>`},
		{name: "restarted", states: []backendState{up, wait(42, "restart"), down}, quorums: []int{2},
			want: `<div class="banner expected" data-startup="-1">Expected after a start: backends wait until the locks they may have held expire; quorum in 42 s (at 17:03:12 UTC).</div>`},
		{name: "epoch", states: []backendState{up, epoch, down}, quorums: []int{2},
			want: `quorum in 12 s (at 17:02:42 UTC).</div>`},
		{name: "max_ttl", states: []backendState{wait(86401, "unmarked"), wait(86401, "unmarked"), wait(86401, "unmarked")}, quorums: []int{2},
			want: `quorum in 24 h 1 min (at 2026-11-29 17:02:31 UTC). Run <code>lockproxy init</code>`},
		{name: "minutes", states: []backendState{up, wait(121, "restart"), up, wait(9, "restart"), wait(3000, "restart")}, quorums: []int{4},
			want: `quorum in 3 min (at 17:04:31 UTC).</div>`},
		{name: "groups", states: append(inGroup(0, up, up, down), inGroup(1, wait(5, "restart"), down, wait(8, "restart"))...), quorums: []int{2, 2},
			want: `<div class="banner expected" data-startup="1">Group 1: Expected after a start: backends wait until the locks they may have held expire; quorum in 8 s (at 17:02:38 UTC).</div>`},
		{name: "quorum had", states: []backendState{wait(5, "restart"), wait(5, "restart"), up}, quorums: []int{2}, seen: true},
		{name: "quorum", states: []backendState{wait(5, "restart"), up, up}, quorums: []int{2}},
		{name: "down too", states: []backendState{wait(5, "restart"), down, down}, quorums: []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notes := startupNotes(tc.states, tc.quorums, func(int) bool { return tc.seen }, now)
			var page bytes.Buffer
			v := statusView{Startup: notes, Backends: make([]backendView, len(tc.states))}
			if len(tc.quorums) > 1 {
				v.Groups = make([]groupView, len(tc.quorums))
			}
			if err := statusTemplate.Execute(&page, v); err != nil {
				t.Fatal(err)
			}
			got := page.String()
			if tc.want == "" {
				if strings.Contains(got, "Expected after a start") {
					t.Errorf("a note where none is due:\n%s", got)
				}
				return
			}
			if n := strings.Count(got, "Expected after a start"); n != 1 || !strings.Contains(got, tc.want) {
				t.Errorf("%d notes; the page lacks\n%s\n%s", n, tc.want, got)
			}
		})
	}
}

// TestStatusPageLockListing: what the locks part of the page says, exactly,
// of a listing's first page: held locks, undecided ones, backends not
// scanned, a failed listing; "No locks held" only where the listing
// decided that.
func TestStatusPageLockListing(t *testing.T) {
	addrs := []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}
	held := heldLockRow{Key: "jobs:1", Owner: "w1", Left: 2500 * time.Millisecond, Present: []bool{true, true, false}, Addrs: addrs}
	undecided := heldLockRow{Key: "jobs:2", Present: []bool{true, false, true}, Addrs: addrs, Tokens: []string{"w2", "w\x003"}}
	heldRow := `<tr data-key="jobs:1"><td class="mono">jobs:1</td><td class="mono">w1</td><td class="num">2.5 s</td><td><span class="on" title="10.0.0.1:6379">●</span><span class="on" title="10.0.0.2:6379">●</span><span class="off" title="10.0.0.3:6379">○</span> 2 of 3</td></tr>`
	undecidedRow := `<tr data-undecided="jobs:2"><td class="mono">jobs:2</td><td class="mono">w2, &#34;w\x003&#34;</td><td><span class="seen" title="10.0.0.1:6379">●</span><span class="dim" title="10.0.0.2:6379">○</span><span class="seen" title="10.0.0.3:6379">●</span> 2 of 3</td></tr>`
	one := `<p class="undecided" id="undecided">1 lock undecided: no quorum answers, so whether it is held cannot be told; lock commands on it answer NOQUORUM.</p>`
	skipped := `<p class="none" id="skipped">Not scanned: 10.0.0.2:6379 did not answer; the keys only it hold are not listed.</p>`
	many := make([]heldLockRow, statusLocks+1)
	for i := range many {
		many[i] = undecided
	}
	for _, tc := range []struct {
		name      string
		sample    lockSample
		want, not []string
	}{
		{name: "none", sample: lockSample{}, want: []string{`<p class="none" id="locks">No locks held.</p>`}, not: []string{`id="undecided"`, `id="skipped"`}},
		{name: "held", sample: lockSample{Held: []heldLockRow{held}}, want: []string{heldRow}, not: []string{"No locks held", `id="undecided"`}},
		{name: "undecided", sample: lockSample{Undecided: []heldLockRow{undecided}}, want: []string{one, undecidedRow}, not: []string{"No locks held", `<table id="locks">`}},
		{name: "both", sample: lockSample{Held: []heldLockRow{held}, Undecided: []heldLockRow{undecided, undecided}}, want: []string{heldRow, undecidedRow,
			`<p class="undecided" id="undecided">2 locks undecided: no quorum answers, so whether they are held cannot be told; lock commands on them answer NOQUORUM.</p>`}},
		{name: "page", sample: lockSample{Undecided: []heldLockRow{undecided}, More: true}, want: []string{`<p class="undecided" id="undecided">1 lock undecided: no quorum answers, so whether it is held cannot be told; lock commands on it answer NOQUORUM. More keys than these are not listed here: GET /locks pages through them all.</p>`}},
		{name: "many", sample: lockSample{Undecided: many}, want: []string{`<p class="undecided" id="undecided">21 locks undecided: no quorum answers, so whether they are held cannot be told; lock commands on them answer NOQUORUM. The first 20 shown.</p>`}},
		{name: "skipped", sample: lockSample{Skipped: addrs[1:2]}, want: []string{`<p class="none" id="locks">No locks held on the backends that answered.</p>`, skipped}, not: []string{"No locks held.<"}},
		{name: "skipped two", sample: lockSample{Held: []heldLockRow{held}, Skipped: addrs[1:]}, want: []string{heldRow, `<p class="none" id="skipped">Not scanned: 10.0.0.2:6379, 10.0.0.3:6379 did not answer; the keys only they hold are not listed.</p>`}},
		{name: "failed", sample: lockSample{Err: context.DeadlineExceeded}, want: []string{`<p class="none" id="locks">Listing failed: context deadline exceeded</p>`}, not: []string{"No locks held"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := statusView{Listing: true}
			locksView(&v, tc.sample)
			var page bytes.Buffer
			if err := statusTemplate.Execute(&page, v); err != nil {
				t.Fatal(err)
			}
			got := page.String()
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("the page lacks\n%s\n%s", want, got)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(got, not) {
					t.Errorf("the page has %q:\n%s", not, got)
				}
			}
		})
	}
	if exp, got := statusLocks, strings.Count(func() string {
		v := statusView{Listing: true}
		locksView(&v, lockSample{Undecided: many})
		var page bytes.Buffer
		statusTemplate.Execute(&page, v)
		return page.String()
	}(), "<tr data-undecided="); exp != got {
		t.Errorf("%d undecided rows shown, want %d", got, exp)
	}
}

// oneGroup is an engine of qc as the one shard group the pages read,
// closed when t ends.
func oneGroup(t *testing.T, qc quorum.Config) *shard.Groups {
	t.Helper()
	engine, err := quorum.New(qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	groups, err := shard.New([]*quorum.Engine{engine})
	if err != nil {
		t.Fatal(err)
	}
	return groups
}
