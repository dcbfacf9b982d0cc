package proxy

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestTTLsAsRedis: through a proxy over real redis-servers, the TTL
// answers and expiries that lock libraries' own tests check read as on
// one Redis.
func TestTTLsAsRedis(t *testing.T) {
	r := startRealRig(t, false)
	do := func(want string, args ...string) {
		t.Helper()
		if got := r.must(t, r.proxy, args...); got != want {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
	// The reply comes once a quorum deleted; the last backend's delete
	// may still be on its way (behind the SET, on a loaded machine).
	gone := func(key string) {
		t.Helper()
		redistest.Eventually(t, func() string {
			for i, left := range r.pttl(t, key) {
				if left != -2 {
					return fmt.Sprintf("backend %d still has %s (PTTL %d)", i, key, left)
				}
			}
			return ""
		})
	}

	// redis-py's Lock(timeout=None): a lock without a TTL has none, to
	// its holder's proxy, though a lease runs on the backends.
	do("+OK\r\n", "SET", "ttl:none", "me", "NX")
	do(":-1\r\n", "TTL", "ttl:none")
	do(":-1\r\n", "PTTL", "ttl:none")
	// python-redis-lock's extend of such a lock answers 2 (NotExpirable)
	// to its owner, 1 to another token, as on Redis.
	extend, err := os.ReadFile("testdata/scripts/python-redis-lock-4.0.1-extend.lua")
	if err != nil {
		t.Fatal(err)
	}
	do(":2\r\n", "EVAL", string(extend), "1", "ttl:none", "me", "10")
	do(":1\r\n", "EVAL", string(extend), "1", "ttl:none", "other", "10")
	do(":-1\r\n", "TTL", "ttl:none")
	do(":1\r\n", "DEL", "ttl:none")
	do(":-2\r\n", "TTL", "ttl:none")
	// A lock asked with a TTL answers what is left of it.
	do("+OK\r\n", "SET", "ttl:some", "me", "NX", "PX", "30000")
	if got := r.must(t, r.proxy, "PTTL", "ttl:some"); !strings.HasPrefix(got, ":2") {
		t.Errorf("PTTL of a 30 s lock: %q", got)
	}

	// PEXPIRE k 0 and EXPIRE k -1 delete, on every backend.
	do(":1\r\n", "PEXPIRE", "ttl:some", "0")
	gone("ttl:some")
	do(":0\r\n", "PEXPIRE", "ttl:some", "0")
	do("+OK\r\n", "SET", "ttl:neg", "me", "NX", "PX", "30000")
	do(":1\r\n", "EXPIRE", "ttl:neg", "-1")
	gone("ttl:neg")
	// And in the transaction of StackExchange.Redis's recipe.
	do("+OK\r\n", "SET", "ttl:tx", "me", "NX", "PX", "30000")
	do("+OK\r\n", "WATCH", "ttl:tx")
	do("$2\r\nme\r\n", "GET", "ttl:tx")
	do("+OK\r\n", "MULTI")
	do("+QUEUED\r\n", "PEXPIRE", "ttl:tx", "0")
	do("*1\r\n:1\r\n", "EXEC")
	gone("ttl:tx")

	// A TTL beyond any max_ttl is named as asked.
	do("-ERR invalid expire time: 9223372036854775807 ms exceeds max_ttl 60000 ms\r\n", "SET", "ttl:far", "me", "NX", "PX", "9223372036854775807")
}
