package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

func TestMain(m *testing.M) {
	redistest.SilenceGoRedis()
	os.Exit(m.Run())
}

// cluster is N real backends and an engine over them.
type cluster struct {
	servers []*redistest.Server
	direct  []*redis.Client // straight to each backend, for assertions
	cfg     Config
	engine  *Engine
	// clock, when the cluster is on stepped time (newSteppedCluster), is
	// the engine's clock and its backends'.
	clock *redistest.SteppedClock
}

func newCluster(t *testing.T, n int, cfg Config) *cluster {
	t.Helper()
	if cfg.NodeTimeout == 0 {
		// Generous: these tests are about outcomes, and a loaded CI machine
		// running -race can take longer than production's 50ms to dial.
		cfg.NodeTimeout = time.Second
	}
	c := &cluster{servers: redistest.StartN(t, n)}
	for _, s := range c.servers {
		cfg.Backends = append(cfg.Backends, s.URL())
		c.direct = append(c.direct, s.Client(t))
	}
	c.cfg = cfg
	c.engine = newEngine(t, cfg)
	return c
}

func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// recordSet records cfg's backend set on servers, as an earlier start with
// every backend answering did: a deployment one of whose backends broke
// since (a first start records nothing until every backend answers).
func recordSet(t *testing.T, cfg Config, servers ...*redistest.Server) {
	t.Helper()
	where := make([]string, len(cfg.Backends))
	for i, u := range cfg.Backends {
		var err error
		if where[i], err = backend.Where(u); err != nil {
			t.Fatal(err)
		}
	}
	record := admit.Final(newBackendSet(cmp.Or(cfg.BackendSetEpoch, 1), where, cfg.SetLabel)).String()
	for _, s := range servers {
		if err := s.Client(t).Set(t.Context(), setKey, record, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

var keySeq atomic.Int64

// uniqueKey keeps cases on shared backends apart.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s:%d", t.Name(), keySeq.Add(1))
}

// values returns what each backend holds for key ("" when absent); a killed
// or paused backend reads as "?".
// listen subscribes to key's release notices on backend i, marked as
// waited for there as a waiting engine marks it (lua/notice.lua), and
// returns once the subscription is confirmed.
func (c *cluster) listen(t *testing.T, i int, key string) *redis.PubSub {
	t.Helper()
	if err := c.direct[i].Set(t.Context(), waitingPrefix+key, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sub := c.direct[i].Subscribe(t.Context(), releasedPrefix+key)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	return sub
}

func (c *cluster) values(t *testing.T, key string) []string {
	t.Helper()
	out := make([]string, len(c.direct))
	for i, d := range c.direct {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		v, err := d.Get(ctx, key).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			out[i] = "?"
		default:
			out[i] = v
		}
	}
	return out
}

// value returns what backend i holds for key ("" when absent, "?" when it
// does not answer).
func (c *cluster) value(t *testing.T, i int, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	v, err := c.direct[i].Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return ""
	case err != nil:
		return "?"
	}
	return v
}

// setCalls returns how many SET commands each backend has run since the
// last resetStats, which put its horizon out of the way: the lock scripts'
// SETs of it (lua/horizon.lua) are not among them.
func (c *cluster) setCalls(t *testing.T, i int) int {
	t.Helper()
	info, err := c.direct[i].Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("backend %d: INFO commandstats: %v", i, err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_set:calls="); ok {
			var calls int
			fmt.Sscanf(rest, "%d", &calls)
			return calls
		}
	}
	return 0
}

func (c *cluster) resetStats(t *testing.T, i int) {
	t.Helper()
	ahead := time.Now().Add(time.Hour).UnixMilli()
	if err := c.direct[i].Do(t.Context(), "SET", horizonKey, ahead, "PXAT", ahead).Err(); err != nil {
		t.Fatalf("backend %d: %v", i, err)
	}
	if err := c.direct[i].ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatalf("backend %d: CONFIG RESETSTAT: %v", i, err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no backends":      {},
		"bad url":          {Backends: []string{"http://x"}},
		"negative timeout": {Backends: []string{"redis://127.0.0.1:1"}, NodeTimeout: -time.Second},
		"drift too large":  {Backends: []string{"redis://127.0.0.1:1"}, DriftFactor: 1.5},
		"negative max ttl": {Backends: []string{"redis://127.0.0.1:1"}, MaxTTL: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

// outcome names what an operation returned, so that tables can say it.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrNotHeld):
		return "refused"
	case errors.Is(err, ErrNoQuorum):
		return "noquorum"
	}
	return "error: " + err.Error()
}

func second[T any](_ T, err error) error { return err }

// holdsOnQuorum says what is wrong unless a quorum of backends holds value
// for key: a minority may lag or miss a write and still be correct.
func (c *cluster) holdsOnQuorum(t *testing.T, key, value string) string {
	held := 0
	for _, v := range c.values(t, key) {
		if v == value {
			held++
		}
	}
	if held < c.engine.Quorum() {
		return fmt.Sprintf("%d backends hold %q for %s, fewer than a quorum (%q)", held, value, key, c.values(t, key))
	}
	return ""
}

// ttlOnQuorum says what is wrong unless a quorum of backends gives key a
// TTL above min.
func (c *cluster) ttlOnQuorum(t *testing.T, key string, min time.Duration) string {
	n := 0
	for _, d := range c.direct {
		if d.PTTL(t.Context(), key).Val() > min {
			n++
		}
	}
	if n < c.engine.Quorum() {
		return fmt.Sprintf("%d backends give %s a TTL above %s, fewer than a quorum", n, key, min)
	}
	return ""
}

func expectValues(got []string, exp ...string) string {
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		return fmt.Sprintf("backends hold %q, expected %q", got, exp)
	}
	return ""
}

// syncBuffer is a bytes.Buffer that the engine's goroutines may log to.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
