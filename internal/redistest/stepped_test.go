package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSteppedClock: a server on a SteppedClock reads the clock's time in
// TIME, expires keys and counts its uptime by the steps alone, at its rate,
// through a restart.
func TestSteppedClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := NewSteppedClock(start)
	servers := StartWith(t, 2, Options{Stepped: clock})
	fast := servers[1]
	fast.SetClockRate(1.5)
	ctx := t.Context()
	c, f := servers[0].Client(t), fast.Client(t)
	defer c.Close()
	defer f.Close()

	serverTime := func(name string, at time.Time) {
		t.Helper()
		client := c
		if name == "fast" {
			client = f
		}
		got, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(at) {
			t.Errorf("%s server's TIME %s, expected %s", name, got.UTC(), at)
		}
	}
	serverTime("plain", start)
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(59*time.Second + 500*time.Millisecond)
	serverTime("plain", start.Add(59*time.Second+500*time.Millisecond))
	serverTime("fast", start.Add(89*time.Second+250*time.Millisecond))
	if got := c.PTTL(ctx, "k").Val(); got != 500*time.Millisecond {
		t.Errorf("PTTL %s after 59.5 s of a minute, expected 500ms", got)
	}
	if !clock.Now().Equal(start.Add(59*time.Second + 500*time.Millisecond)) {
		t.Errorf("the fake clock reads %s", clock.Now())
	}
	clock.Advance(501 * time.Millisecond) // Redis expires a key after its time, not at it
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Error("the key outlived its minute of steps")
	}
	if up := uptime(t, c); up < 60 || up > 61 {
		t.Errorf("uptime %d s after a minute of steps", up)
	}

	servers[0].Restart()
	c2 := servers[0].Client(t)
	defer c2.Close()
	if up := uptime(t, c2); up != 0 {
		t.Errorf("uptime %d s right after the restart", up)
	}
	clock.Advance(10 * time.Second)
	if up := uptime(t, c2); up != 10 {
		t.Errorf("uptime %d s after 10 s of steps", up)
	}
}

func uptime(t *testing.T, c interface {
	Info(ctx context.Context, sections ...string) *redis.StringCmd
}) int {
	t.Helper()
	info, err := c.Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("uptime_in_seconds: %v", err)
	}
	return n
}
