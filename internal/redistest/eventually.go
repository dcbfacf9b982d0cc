package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Eventually polls cond until it returns "" and fails the test with cond's
// last message after a generous deadline. Use it for outcomes that settle
// shortly after an answer, such as a minority backend's late write.
func Eventually(t testing.TB, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SilenceGoRedis stops go-redis logging every refused dial, which tests that
// kill backends cause on purpose. Call it from TestMain.
func SilenceGoRedis() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
