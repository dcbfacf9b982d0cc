package test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSecretEnv: backends, password and users from LOCKPROXY_ variables,
// none of them on the command line or in the log; a flag overrides its
// variable.
func TestSecretEnv(t *testing.T) {
	proxyTest(t)
	_, list := backends(t, 3)
	hash := sha256Hex("user-pw")
	p := startProxyOn(t, "127.0.0.1:0", listeningLine, []string{
		"LOCKPROXY_BACKENDS=" + list,
		"LOCKPROXY_PASSWORD=env-pw",
		"LOCKPROXY_USERS=app:sha256:" + hash + ":app:\nops:sha256:" + hash,
		"LOCKPROXY_MAX_TTL=1s",
		"LOCKPROXY_SERVICE_HOST=10.0.0.1", // what Kubernetes sets: not a key, ignored
	}, "-restart-quarantine=false", "-backend-timeout", "500ms", "-max-ttl", "30s")

	def := redis.NewClient(&redis.Options{Addr: p.Addr, Password: "env-pw", MaxRetries: -1})
	defer def.Close()
	// 20 s is within the flag's max_ttl and beyond the variable's.
	if got := do(t, def, "SET", "env-lock", "v", "NX", "PX", 20000); got != "OK" {
		t.Fatalf("SET as the default user: %s", got)
	}
	app := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "app", Password: "user-pw", MaxRetries: -1})
	defer app.Close()
	if got := do(t, app, "SET", "env-lock", "w", "NX", "PX", 20000); got != "OK" {
		t.Fatalf("SET as app, under its prefix: %s", got)
	}
	if got := do(t, def, "GET", "app:env-lock"); got != "w" {
		t.Fatalf("app's lock under app:: %s", got)
	}
	for _, secret := range []string{"env-pw", "user-pw", hash, "10.0.0.1"} {
		if strings.Contains(p.Log(), secret) {
			t.Fatalf("the log holds %q:\n%s", secret, p.Log())
		}
	}
}

// TestSecretFiles: password_file and users_file are read at start and again
// on SIGHUP: a rotated password admits the next AUTH and refuses the old
// one, a connection authenticated before keeps working, and a user added to
// the file can AUTH. No secret is logged.
func TestSecretFiles(t *testing.T) {
	proxyTest(t)
	pwFile := writeFile(t, "password", "first-pw\n")
	usersFile := writeFile(t, "users", "# tenants\napp:sha256:"+sha256Hex("app-pw")+":app:\n")
	c := newCluster(t, 3, "-password-file", pwFile, "-users-file", usersFile)

	first := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Password: "first-pw", MaxRetries: -1})
	defer first.Close()
	before := first.Conn() // one connection, authenticated once
	defer before.Close()
	if err := before.SetNX(t.Context(), "file-lock", "before", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	rewrite(t, pwFile, "second-pw\n")
	rewrite(t, usersFile, "app:sha256:"+sha256Hex("app-pw")+":app:\nnew:sha256:"+sha256Hex("new-pw")+":new:\n")
	if logged := c.proxy.reload(t); !strings.Contains(logged, `msg="configuration reloaded" changed=password_file,users_file`) {
		t.Fatalf("reload after rotating the files:\n%s", logged)
	}
	client := func(user, pass string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Username: user, Password: pass, MaxRetries: -1})
		t.Cleanup(func() { r.Close() })
		return r
	}
	if got := do(t, client("", "first-pw"), "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("the old password after the rotation: %s", got)
	}
	if got := do(t, client("", "second-pw"), "GET", "file-lock"); got != "before" {
		t.Fatalf("the new password: %s", got)
	}
	if got := do(t, client("new", "new-pw"), "SET", "file-lock", "new", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("a user added to users_file: %s", got)
	}
	if got, err := before.Get(t.Context(), "file-lock").Result(); err != nil || got != "before" {
		t.Fatalf("the connection authenticated before the rotation: %q, %v", got, err)
	}

	// A file emptied by mistake is refused: authentication stays on.
	rewrite(t, pwFile, "")
	if logged := c.proxy.reload(t); !strings.Contains(logged, `level=ERROR msg="reload failed: the running configuration is kept" err="password_file: `) {
		t.Fatalf("reload of an empty password file:\n%s", logged)
	}
	if got := do(t, client("", "second-pw"), "PING"); got != "PONG" {
		t.Fatalf("the password after a refused reload: %s", got)
	}
	log := c.proxy.Log()
	for _, secret := range []string{"first-pw", "second-pw", "app-pw", "new-pw", sha256Hex("app-pw"), sha256Hex("new-pw")} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, log)
		}
	}
}
