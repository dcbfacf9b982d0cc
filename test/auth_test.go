package test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// dbSizes returns how many keys each backend holds for clients.
func (c *cluster) dbSizes(t *testing.T) []int64 {
	t.Helper()
	out := make([]int64, len(c.servers))
	for i, s := range c.servers {
		out[i] = clientKeys(t, s)
	}
	return out
}

// clientKeys counts a backend's keys but lockproxy's own ({lockproxy}:*,
// the marker of its data set).
func clientKeys(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	n := int64(0)
	for _, k := range s.Client(t).Keys(t.Context(), "*").Val() {
		if !strings.HasPrefix(k, quorum.ReservedPrefix) {
			n++
		}
	}
	return n
}

// TestAuthNoAuthReachesNoBackend is issue 6's acceptance: with a password
// configured, an unauthenticated SET gets NOAUTH and nothing reaches the
// backends; PING is served before AUTH.
func TestAuthNoAuthReachesNoBackend(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-password", "s3cret")
	anon := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Protocol: 2, MaxRetries: -1})
	defer anon.Close()
	for _, cmd := range [][]any{
		{"SET", "k", "me", "NX", "PX", 10000},
		{"SETNX", "k", "me"},
		{"GET", "k"},
		{"DEL", "k"},
		{"EVAL", compareAndDelete, 1, "k", "me"},
	} {
		if got := do(t, anon, cmd...); got != "ERR:NOAUTH Authentication required." {
			t.Errorf("%v without AUTH: %s", cmd, got)
		}
	}
	if got := do(t, anon, "PING"); got != "PONG" {
		t.Errorf("PING without AUTH: %s", got)
	}
	if got := redisCLI(t, c.proxy.Addr, "SET", "k", "me", "NX", "PX", "10000"); !strings.Contains(got, "NOAUTH") {
		t.Errorf("redis-cli SET without AUTH: %s", got)
	}
	if got := c.dbSizes(t); !reflect.DeepEqual(got, []int64{0, 0, 0}) {
		t.Fatalf("backends hold keys after unauthenticated commands: %v", got)
	}
	// redis-cli -a sends AUTH first; go-redis with a password sends HELLO 3 AUTH.
	if got := redisCLI(t, c.proxy.Addr, "--no-auth-warning", "-a", "s3cret", "SET", "k", "me", "NX", "PX", "10000"); got != "OK" {
		t.Fatalf("redis-cli -a: %s", got)
	}
	authed := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Password: "s3cret", MaxRetries: -1})
	defer authed.Close()
	if got := do(t, authed, "EVAL", compareAndDelete, 1, "k", "me"); got != "1" {
		t.Fatalf("release after HELLO 3 AUTH: %s", got)
	}
}

// TestAuthUsersKeyPrefix: named users from the config file and from flags,
// with SHA-256 and bcrypt hashes; each user's locks land under its prefix
// on the backends, and another user can neither see nor release them.
func TestAuthUsersKeyPrefix(t *testing.T) {
	proxyTest(t)
	bc, err := bcrypt.GenerateFromPassword([]byte("pw-two"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lockproxy.toml")
	conf := `
[[users]]
name = "app1"
password_sha256 = "` + sha256Hex("pw-one") + `"
key_prefix = "app1:"

[[users]]
name = "app2"
password_bcrypt = "` + string(bc) + `"
key_prefix = "app2:"
`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3, "-config", path, "-log-level", "debug")
	client := func(user, pass string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Username: user, Password: pass, MaxRetries: -1})
		t.Cleanup(func() { r.Close() })
		return r
	}
	app1, app2 := client("app1", "pw-one"), client("app2", "pw-two")
	if got := do(t, client("app1", "pw-two"), "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("wrong password: %s", got)
	}
	if got := do(t, client("default", "pw-one"), "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("the default user is off when users are configured: %s", got)
	}

	if got := do(t, app1, "SET", "orders", "t1", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("app1 SET: %s", got)
	}
	if got := c.held(t, "app1:orders"); !reflect.DeepEqual(got, []string{"t1", "t1", "t1"}) {
		t.Fatalf("app1's lock on the backends under app1:orders: %q", got)
	}
	if got := c.held(t, "orders"); !reflect.DeepEqual(got, []string{"", "", ""}) {
		t.Fatalf("a lock landed without its prefix: %q", got)
	}
	// app2 has its own "orders": it can take it, and cannot reach app1's.
	for _, step := range []struct {
		cmd  []any
		want string
	}{
		{[]any{"GET", "orders"}, "nil"},
		{[]any{"EVAL", compareAndDelete, 1, "orders", "t1"}, "0"},
		{[]any{"DEL", "orders"}, "0"},
		{[]any{"SET", "orders", "t2", "NX", "PX", 30000}, "OK"},
		{[]any{"DEL", "orders"}, "1"},
	} {
		if got := do(t, app2, step.cmd...); got != step.want {
			t.Fatalf("app2 %v: want %s, got %s", step.cmd, step.want, got)
		}
	}
	if got := c.held(t, "app1:orders"); !reflect.DeepEqual(got, []string{"t1", "t1", "t1"}) {
		t.Fatalf("app2 touched app1's lock: %q", got)
	}
	// Replies are unchanged by the prefix; app1 releases its own.
	if got := do(t, app1, "GET", "orders"); got != "t1" {
		t.Fatalf("app1 GET: %s", got)
	}
	if got := redisCLI(t, c.proxy.Addr, "--no-auth-warning", "--user", "app1", "--pass", "pw-one", "EVAL", compareAndDelete, "1", "orders", "t1"); got != "1" {
		t.Fatalf("redis-cli --user app1 release: %s", got)
	}
	if got := c.dbSizes(t); !reflect.DeepEqual(got, []int64{0, 0, 0}) {
		t.Fatalf("keys left on the backends: %v", got)
	}
	// Neither passwords nor hashes are ever logged, even at debug level.
	log := c.proxy.Log()
	for _, secret := range []string{"pw-one", "pw-two", sha256Hex("pw-one"), string(bc)} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, log)
		}
	}
}

// TestAuthUserFlag: the flag form of a user, and a bad one stops the
// proxy with a message naming the key and not the hash.
func TestAuthUserFlag(t *testing.T) {
	proxyTest(t)
	hash := sha256Hex("flag-pw")
	c := newCluster(t, 3, "-users", "ops:sha256:"+hash+":ops:", "-password", "legacy")
	ops := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Username: "ops", Password: "flag-pw", MaxRetries: -1})
	defer ops.Close()
	if got := do(t, ops, "SET", "k", "v", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("ops SET: %s", got)
	}
	if got := c.held(t, "ops:k"); got[0] != "v" {
		t.Fatalf("ops:k on the backends: %q", got)
	}
	// The password is the default user's, without a prefix.
	if got := redisCLI(t, c.proxy.Addr, "--no-auth-warning", "-a", "legacy", "GET", "k"); got != "" {
		t.Fatalf("the default user sees ops's key: %q", got)
	}

	out, err := runBinary("-users", "ops:sha256:"+hash[:20])
	if err == nil || !strings.Contains(out, "users") || strings.Contains(out, hash[:20]) {
		t.Fatalf("a short hash: %v\n%s", err, out)
	}
}

// TestAuthOverlappingPrefixes: users whose key prefixes nest (one starts
// with the other) could reach each other's locks, so lockproxy refuses to
// start, naming both users and both prefixes. Users that share one prefix,
// or have none (they see every key, an administrator's account), are
// accepted.
func TestAuthOverlappingPrefixes(t *testing.T) {
	proxyTest(t)
	hash := sha256Hex("pw")
	out, err := runBinary("-users", "outer:sha256:"+hash+":t:", "-users", "inner:sha256:"+hash+":t:x:")
	if err == nil {
		t.Fatalf("lockproxy started with the nested prefixes t: and t:x:\n%s", out)
	}
	for _, want := range []string{"users", `"outer"`, `"t:"`, `"inner"`, `"t:x:"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not name %s: %s", want, out)
		}
	}
	c := newCluster(t, 3, "-users", "a:sha256:"+hash+":t:", "-users", "b:sha256:"+hash+":t:", "-users", "admin:sha256:"+hash)
	admin := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Username: "admin", Password: "pw", MaxRetries: -1})
	defer admin.Close()
	if got := do(t, admin, "SET", "t:k", "v", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("an unprefixed user beside prefixed ones: %s", got)
	}
}
