package proxy

import (
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestRedissonRefusalWait: a refused acquisition tells Redisson to wait
// out the holder's lease only where a holder may have the lock on a
// quorum; where the contenders split the votes and all failed, no unlock
// message will come, and it must try again within milliseconds.
func TestRedissonRefusalWait(t *testing.T) {
	undecided := &quorum.NoQuorumError{Counted: 4, Agreed: 2, Needed: 3, Total: 5}
	for _, c := range []struct {
		name     string
		res      quorum.Result
		err      error
		min, max int64 // ms; 0, 0 for an error
	}{
		{"held on a quorum", quorum.Result{HolderTTL: 30 * time.Second}, quorum.ErrNotAcquired, 30000, 30000},
		{"undecided, held somewhere", quorum.Result{HolderTTL: 900 * time.Millisecond}, undecided, 900, 900},
		{"split between contenders", quorum.Result{HolderTTL: 30 * time.Second, Split: true}, quorum.ErrNotAcquired, 10, 40},
		{"undecided split", quorum.Result{HolderTTL: 30 * time.Second, Split: true}, undecided, 10, 40},
		{"no holder's lease", quorum.Result{}, quorum.ErrNotAcquired, 10, 40},
		{"undecided, no holder", quorum.Result{Split: true}, undecided, 0, 0},
	} {
		for range 20 { // the jitter's whole range, most likely
			wait, err := redissonRefusal(c.res, c.err)
			if c.max == 0 {
				if !errors.Is(err, quorum.ErrNoQuorum) {
					t.Fatalf("%s: waits %d ms (%v), want the NOQUORUM error", c.name, wait, err)
				}
				continue
			}
			if err != nil || wait < c.min || wait > c.max {
				t.Fatalf("%s: waits %d ms (%v), want %d to %d", c.name, wait, err, c.min, c.max)
			}
		}
	}
}
