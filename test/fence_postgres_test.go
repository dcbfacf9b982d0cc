//go:build !windows

// These tests run PostgreSQL as its own user and stop a holder with
// SIGSTOP: Windows has neither.

package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/testcerts"
)

// The exit codes of examples/fenced-postgres.
const (
	exampleAccepted = 0
	exampleNotHeld  = 2
	exampleRefused  = 3
)

var acquiredLine = regexp.MustCompile(`(?m)^acquired token=(\d+)$`)

// TestFencePostgresLateWrite runs examples/fenced-postgres against a real
// PostgreSQL: holder A acquires with a short TTL and is SIGSTOPped before
// it writes; once its lock has expired, holder B acquires (a larger token)
// and writes; A, resumed, writes late. With the fence check in the
// statement PostgreSQL refuses A's write and the row keeps B's; without it
// (the example's -unfenced, the wrong way) A's late write overwrites B's,
// which shows that the fence is what refused it. The proxy requires a
// password and serves mutual TLS beside plain TCP: the example reaches it
// with the options of the proxy's own client side (subtest "auth and tls").
func TestFencePostgresLateWrite(t *testing.T) {
	proxyTest(t)
	dsn := startPostgres(t)
	const password = "fence-pw"
	certs := testcerts.New(t)
	c := newCluster(t, 3, "-fencing", "-password", password, "-tls-listen", "127.0.0.1:0",
		"-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ServerKey, "-tls-ca-cert-file", certs.CA)
	tlsAddr := c.proxy.waitLog(t, tlsListeningLine)[1]
	example := filepath.Join(t.TempDir(), "fenced-postgres")
	if out, err := exec.Command("go", "build", "-o", example, "../examples/fenced-postgres").CombinedOutput(); err != nil {
		t.Fatalf("building examples/fenced-postgres: %v\n%s", err, out)
	}
	db, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })

	for _, tc := range []struct {
		name     string
		id       int64
		lateFlag []string
		// lateCode is A's exit code, lateWins whether the row ends with A's
		// write rather than B's.
		lateCode int
		lateWins bool
	}{
		{name: "fenced", id: 1, lateCode: exampleRefused},
		{name: "unfenced", id: 2, lateFlag: []string{"-unfenced"}, lateCode: exampleAccepted, lateWins: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			common := []string{"-proxy", c.proxy.Addr, "-password", password, "-dsn", dsn, "-key", "resource:" + tc.name, "-id", strconv.FormatInt(tc.id, 10)}
			a := startHolder(t, example, append(append(common, "-ttl", "500ms", "-data", "A", "-wait-before-write"), tc.lateFlag...)...)
			tokenA := a.acquired(t)
			// The stall a holder cannot see: a GC pause, swap, a stopped VM.
			if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}

			// B tries until A's lock has expired.
			var outB string
			var codeB int
			redistest.Eventually(t, func() string {
				if outB, codeB = runHolder(t, example, append(common, "-data", "B")...); codeB == exampleNotHeld {
					return "B never acquired: A's lock did not expire\n" + outB
				}
				return ""
			})
			t.Logf("B:\n%s", outB)
			tokenB := parseToken(t, outB)
			if codeB != exampleAccepted || !strings.Contains(outB, fmt.Sprintf("write accepted token=%d\n", tokenB)) {
				t.Fatalf("B: exit %d, want %d (accepted):\n%s", codeB, exampleAccepted, outB)
			}
			if tokenB <= tokenA {
				t.Fatalf("B's token %d is not above A's %d", tokenB, tokenA)
			}

			if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			outA, codeA := a.write(t)
			t.Logf("A, resumed:\n%s", outA)
			wantLine := fmt.Sprintf("write refused token=%d", tokenA)
			if tc.lateCode == exampleAccepted {
				wantLine = fmt.Sprintf("write accepted token=%d", tokenA)
			}
			if exp, got := tc.lateCode, codeA; exp != got || !strings.Contains(outA, wantLine) {
				t.Errorf("A's late write: exit %d, want %d and %q:\n%s", got, exp, wantLine, outA)
			}

			var data string
			var fence int64
			if err := db.QueryRow(t.Context(), "SELECT data, fence FROM resource WHERE id = $1", tc.id).Scan(&data, &fence); err != nil {
				t.Fatal(err)
			}
			wantData, wantFence := "B", tokenB
			if tc.lateWins {
				wantData, wantFence = "A", tokenA
			}
			if data != wantData || fence != wantFence {
				t.Errorf("row %d holds data=%q fence=%d, want data=%q fence=%d (A's token %d, B's %d)",
					tc.id, data, fence, wantData, wantFence, tokenA, tokenB)
			}
		})
	}

	t.Run("auth and tls", func(t *testing.T) {
		pwFile := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		common := []string{"-dsn", dsn, "-key", "resource:tls", "-id", "3"}
		withCert := []string{"-tls-ca-cert-file", certs.CA, "-tls-cert-file", certs.ClientCert, "-tls-key-file", certs.ClientKey}
		for _, run := range []struct {
			name string
			env  []string
			args []string
			code int
			out  string // a line the output must have
		}{
			{name: "url", args: append([]string{"-proxy", "rediss://:" + password + "@" + tlsAddr}, withCert...), out: "write accepted token="},
			{name: "flags and REDISCLI_AUTH", env: []string{"REDISCLI_AUTH=" + password},
				args: append([]string{"-proxy", tlsAddr, "-tls-server-name", "localhost"}, withCert...), out: "write accepted token="},
			{name: "password file", args: append([]string{"-proxy", tlsAddr, "-password-file", pwFile}, withCert...), out: "write accepted token="},
			{name: "no password", args: append([]string{"-proxy", tlsAddr}, withCert...), code: 1, out: "NOAUTH"},
			{name: "no client certificate", args: []string{"-proxy", tlsAddr, "-password", password, "-tls-ca-cert-file", certs.CA}, code: 1, out: "acquire: remote error: tls: certificate required"},
			{name: "plain TCP to TLS", args: []string{"-proxy", tlsAddr, "-password", password}, code: 1, out: "acquire: "},
			{name: "wrong server name", args: append([]string{"-proxy", tlsAddr, "-password", password, "-tls-server-name", "proxy.example"}, withCert...),
				code: 1, out: "certificate is valid for"},
		} {
			out, code := runHolderEnv(t, run.env, example, append(common, run.args...)...)
			if code != run.code || !strings.Contains(out, run.out) {
				t.Errorf("%s: exit %d, want %d with %q:\n%s", run.name, code, run.code, run.out, out)
			}
		}
	})
}

// holder is a running examples/fenced-postgres started with
// -wait-before-write.
type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its standard output, closed at its end
	stderr bytes.Buffer
	out    strings.Builder // the lines read from lines so far
}

// startHolder starts the example at bin with args; the test's cleanup
// kills it.
func startHolder(t *testing.T, bin string, args ...string) *holder {
	t.Helper()
	h := &holder{cmd: exec.Command(bin, args...), lines: make(chan string)}
	h.cmd.Stderr = &h.stderr
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		// SIGKILL ends a stopped process too.
		h.cmd.Process.Kill()
		for range h.lines {
		}
		h.cmd.Wait()
	})
	return h
}

// acquired waits for the holder's "acquired token=N" line and returns N.
func (h *holder) acquired(t *testing.T) int64 {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			h.cmd.Wait() // before reading stderr, which Wait finishes copying
			t.Fatalf("holder exited before acquiring:\n%s", h.stderr.String())
		}
		h.out.WriteString(line + "\n")
		return parseToken(t, h.out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("holder did not acquire in 30 s")
	}
	return 0
}

// write lets the holder past its wait, waits for it to exit and returns
// its standard output and exit code.
func (h *holder) write(t *testing.T) (string, int) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, "\n"); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-h.lines:
			if ok {
				h.out.WriteString(line + "\n")
				continue
			}
			h.cmd.Wait()
			return h.out.String() + h.stderr.String(), h.cmd.ProcessState.ExitCode()
		case <-timeout:
			t.Fatalf("holder did not exit in 30 s after writing:\n%s", h.out.String())
		}
	}
}

// runHolder runs examples/fenced-postgres to its end and returns its
// output and exit code.
func runHolder(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	return runHolderEnv(t, nil, bin, args...)
}

// runHolderEnv is runHolder with env added to the test's environment.
func runHolderEnv(t *testing.T, env []string, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %s: %v", bin, err)
	}
	if exit != nil {
		return string(out), exit.ExitCode()
	}
	return string(out), 0
}

// parseToken returns the token of the example's "acquired token=N" line.
func parseToken(t *testing.T, out string) int64 {
	t.Helper()
	m := acquiredLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in:\n%s", acquiredLine, out)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startPostgres runs a throwaway PostgreSQL server (initdb, then postgres)
// on a free loopback port, with its data and unix socket in a temporary
// directory, and returns a DSN for its superuser postgres (trust auth).
// It skips the test when PostgreSQL is not installed, except under CI,
// where a skipped test would hide a missing install step.
func startPostgres(t *testing.T) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		msg := "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres); install it with: apt-get install -y postgresql"
		if ci := os.Getenv("CI"); ci != "" && ci != "false" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	sort.Strings(bins)
	binDir := filepath.Dir(bins[len(bins)-1])

	// Not t.TempDir: its parent is private to root, and as root the server
	// runs as another user.
	dir, err := os.MkdirTemp("", "lockproxy-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	attr := &syscall.SysProcAttr{}
	// postgres refuses to run as root.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres user, which the postgresql package creates: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(binDir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.SysProcAttr = dir, attr
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	// The port is free when picked and may be taken before postgres binds
	// it: try a few.
	var errs []error
	for range 3 {
		dsn, err := launchPostgres(t, filepath.Join(binDir, "postgres"), dir, data, attr)
		if err == nil {
			return dsn
		}
		errs = append(errs, err)
	}
	t.Fatal(errors.Join(errs...))
	return ""
}

// launchPostgres starts postgres on a free port and waits until it accepts
// a connection; the test's cleanup shuts it down.
func launchPostgres(t *testing.T, bin, dir, data string, attr *syscall.SysProcAttr) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	// Durability is not under test: fsync off keeps it fast on a busy box.
	cmd := exec.Command(bin, "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.Dir, cmd.SysProcAttr, cmd.Stdout, cmd.Stderr = dir, attr, logFile, logFile
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	stop := func() {
		// SIGQUIT is postgres's immediate shutdown: it ends its backends too,
		// where SIGKILL would leave them running.
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}

	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		cancel()
		if err == nil {
			conn.Close(t.Context())
			t.Cleanup(stop)
			return dsn, nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			return "", fmt.Errorf("postgres on port %d exited: %s", port, log)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(logPath)
			return "", fmt.Errorf("postgres on port %d did not accept connections in 30 s: %v\n%s", port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
