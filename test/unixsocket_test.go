package test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestUnixSocket: with unix_socket set, go-redis and redis-cli lock
// through the socket as through listen, which keeps serving beside it;
// the socket has unix_socket_perm's permissions and goes when the proxy
// stops.
func TestUnixSocket(t *testing.T) {
	proxyTest(t)
	path := filepath.Join(t.TempDir(), "lockproxy.sock")
	c := newCluster(t, 3, "-unix-socket", path, "-unix-socket-perm", "770")
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o770 {
		t.Errorf("the socket: %v, want a socket with permissions 770", fi.Mode())
	}

	local := redis.NewClient(&redis.Options{Network: "unix", Addr: path, MaxRetries: -1})
	defer local.Close()
	if ok, err := local.SetNX(t.Context(), "k", "me", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX PX through the socket: %v, %v", ok, err)
	}
	if got := c.held(t, "k"); !reflect.DeepEqual(got, []string{"me", "me", "me"}) {
		t.Fatalf("backends after SET through the socket: %q", got)
	}
	// Over TCP, another client finds it held.
	if ok, err := c.proxy.Client(t).SetNX(t.Context(), "k", "you", 10*time.Second).Result(); err != nil || ok {
		t.Fatalf("SET NX PX over TCP of a key held: %v, %v", ok, err)
	}
	out, err := exec.Command("redis-cli", "-s", path, "EVAL", compareAndDelete, "1", "k", "me").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("redis-cli -s: release: %v, %s", err, out)
	}
	if got := c.held(t, "k"); !reflect.DeepEqual(got, []string{"", "", ""}) {
		t.Fatalf("backends after the release through the socket: %q", got)
	}

	if code := c.proxy.Signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket after the proxy stopped: %v, want it gone", err)
	}
}

// TestUnixSocketLeftOrTaken: a socket that a killed proxy left behind is
// replaced at start; one that another server answers on is not taken,
// and the proxy stops with an error that says so; a path that is not a
// socket is never removed.
func TestUnixSocketLeftOrTaken(t *testing.T) {
	proxyTest(t)
	_, list := backends(t, 1)
	dir := t.TempDir()

	// Left: bound, never listened on, as after a SIGKILL.
	left := filepath.Join(dir, "left.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: left}); err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	startProxy(t, "-backends", list, "-restart-quarantine=false", "-unix-socket", left)
	local := redis.NewClient(&redis.Options{Network: "unix", Addr: left, MaxRetries: -1})
	defer local.Close()
	if err := local.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING through a socket that replaced a left one: %v", err)
	}

	// Taken: another server answers on it.
	taken := filepath.Join(dir, "taken.sock")
	ln, err := net.Listen("unix", taken)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// And a regular file.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{taken: "in use", file: "is not a socket"} {
		out, err := exec.Command(binary, "-listen", "127.0.0.1:0", "-backends", list, "-unix-socket", path).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "unix_socket: ") || !strings.Contains(string(out), want) {
			t.Errorf("lockproxy -unix-socket %s: %v\n%s\nwant it to stop, saying %q", filepath.Base(path), err, out, want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file after: %q, %v", b, err)
	}
	if _, err := os.Lstat(taken); err != nil {
		t.Errorf("the other server's socket after: %v", err)
	}
}
