package test

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedDefault: with no configuration the proxy runs on in-memory
// backends, says so once, and takes a lock at once.
// It runs alone (no proxyTest): beside other tests, its in-process backends
// once missed the default 50 ms backend timeout.
func TestEmbeddedDefault(t *testing.T) {
	p := startProxy(t)
	if got := redisCLI(t, p.Addr, "SET", "mylock", "me", "NX", "PX", "30000"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if got := redisCLI(t, p.Addr, "SET", "mylock", "you", "NX", "PX", "30000"); got != "" {
		t.Fatalf("contended SET: %q", got)
	}
	if got, err := strconv.Atoi(redisCLI(t, p.Addr, "PTTL", "mylock")); err != nil || got <= 0 || got > 30000 {
		t.Fatalf("PTTL: %d, %v", got, err)
	}
	if n := strings.Count(p.Log(), "NO fault tolerance"); n != 1 {
		t.Fatalf("expected one warning about the embedded backends, got %d:\n%s", n, p.Log())
	}
}

// TestCrashRequest: the 27-byte request that panics redcon gets a protocol
// error; the proxy lives on and serves locks.
func TestCrashRequest(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	conn, err := net.Dial("tcp", c.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("*1\r\n$9223372036854775807\r\n")); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.HasPrefix(line, "-ERR Protocol error") {
		t.Fatalf("expected a protocol error, got %q", line)
	}
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("connection not closed cleanly: %v", err)
	}
	cli := c.proxy.Client(t)
	if got := do(t, cli, "SET", "after", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("lock after the crash request: %q", got)
	}
}

// TestBadStartup: a bad configuration stops the proxy with a message naming
// the key, before it listens.
func TestBadStartup(t *testing.T) {
	proxyTest(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backends", "http://127.0.0.1:1"}, "backends"},
		{[]string{"-max-ttl", "forever"}, "max_ttl"},
		{[]string{"-drift-factor", "2"}, "drift_factor"},
		{[]string{"-listen", "127.0.0.1:99999"}, `listen: port 99999 is out of range in "127.0.0.1:99999"`},
		{[]string{"-metrics", "127.0.0.1:99999"}, `metrics: port 99999 is out of range in "127.0.0.1:99999"`},
		{[]string{"-backends", "redis://127.0.0.1:99999"}, "backends: entry 1 (127.0.0.1:99999): port 99999 is out of range: a port is 1 to 65535"},
		{[]string{"-backends", "127.0.0.1:6379"}, "backends: entry 1 (127.0.0.1:6379): no scheme: write redis://127.0.0.1:6379"},
	} {
		out, err := runBinary(tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: expected a failure naming %s, got %v:\n%s", tc.args, tc.want, err, out)
		}
	}
}

// TestHelpAndUsage: -help and -h print what lockproxy is before the flags
// on stdout and exit 0; -version prints one line and exits 0; a mistyped
// flag exits 2 with a suggestion and a pointer to -help, not the whole of
// it.
func TestHelpAndUsage(t *testing.T) {
	proxyTest(t)
	for _, arg := range []string{"-help", "-h"} {
		stdout, stderr, code := runExit(t, arg)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "lockproxy speaks the Redis protocol") || !strings.Contains(stdout, "\n  -max-ttl ") {
			t.Errorf("%s: exit %d, stderr %q, stdout:\n%s", arg, code, stderr, stdout)
		}
	}
	stdout, stderr, code := runExit(t, "-version")
	if line := regexp.MustCompile(`^lockproxy \S+ \(commit \S+, go[\d.]+\S*, ` + runtime.GOOS + "/" + runtime.GOARCH + `\)\n$`); code != 0 || stderr != "" || !line.MatchString(stdout) {
		t.Errorf("-version: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	_, stderr, code = runExit(t, "-backend", "redis://127.0.0.1:6379")
	want := "lockproxy: flag provided but not defined: -backend\ndid you mean -backends?\nRun lockproxy -help for every flag and configuration key.\n"
	if code != 2 || stderr != want {
		t.Errorf("-backend: exit %d, want 2 and\n%q\ngot\n%q", code, want, stderr)
	}
}

// runExit runs lockproxy with args alone and returns what it wrote to each
// stream and its exit status.
func runExit(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), binary, args...)
	cmd.Env = proxyEnv(nil)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestMetricsPortTaken: with the metrics port taken the proxy fails at
// start naming it, and never says it is listening first.
func TestMetricsPortTaken(t *testing.T) {
	proxyTest(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out, err := runBinary("-metrics", taken.Addr().String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v:\n%s", err, out)
	}
	if want := "lockproxy: metrics: listen tcp " + taken.Addr().String() + ": bind: address already in use\n"; !strings.HasSuffix(out, want) {
		t.Errorf("want the output to end with %q, got:\n%s", want, out)
	}
	if strings.Contains(out, "listening") {
		t.Errorf("logged a listener before failing:\n%s", out)
	}
}

// TestRelease: make release's logic for every platform it lists, and one
// real build. First the Makefile runs with a stand-in for go that writes
// what it was asked into the file it was to build: each of the six
// platforms gets its file name (.exe on Windows), GOOS and GOARCH, no cgo
// (static: no libc to load, which -race's cgo would need), -trimpath, and
// the version stamped, and SHA256SUMS lists them all for sha256sum -c.
// Then this host's binary alone is built for real: static (no ELF
// interpreter), and it says the same version in -version, INFO and
// lockproxy_build_info. The cross-compilation itself is Go's: six real
// builds took about 11 CPU-minutes on a cold cache, which the CHANGELOG's
// timing reports and no test repeats. The build runs niced: a proxyTest,
// not a heavyTest, it compiles beside a safety run and takes only the CPU
// the runs leave, rather than hold up the heavy tests for its turn.
func TestRelease(t *testing.T) {
	proxyTest(t)
	for tool, pkg := range map[string]string{"make": "make", "git": "git", "sha256sum": "coreutils", "nice": "coreutils"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("make release needs %s: apt-get install %s", tool, pkg)
		}
	}
	describe, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	version := strings.TrimSpace(string(describe))
	if err != nil {
		version = "unknown" // not a git checkout: the Makefile's fallback
	}
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", "..", "--eval", "release-platforms: ; @echo $(PLATFORMS)", "release-platforms").CombinedOutput()
	platforms := strings.Fields(string(out))
	if want := []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"}; err != nil || !slices.Equal(platforms, want) {
		t.Fatalf("the Makefile's PLATFORMS: %v %q, want %v", err, out, want)
	}

	fake := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nfor a; do [ \"$prev\" != -o ] || out=$a; prev=$a; done\n" +
		"printf '%s\\n' \"GOOS=$GOOS\" \"GOARCH=$GOARCH\" \"CGO_ENABLED=$CGO_ENABLED\" \"$@\" >\"$out\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	if out, err := exec.Command("make", "-C", "..", "release", "DIST="+dist, "GO="+fake).CombinedOutput(); err != nil {
		t.Fatalf("make release with a stand-in for go: %v\n%s", err, out)
	}
	want := []string{"SHA256SUMS"}
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		name := "lockproxy-" + version + "-" + goos + "-" + goarch
		if goos == "windows" {
			name += ".exe"
		}
		want = append(want, name)
		asked, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			continue // the listing below fails
		}
		lines := strings.Split(strings.TrimSpace(string(asked)), "\n")
		stamped := func(l string) bool {
			return strings.HasPrefix(l, "-s -w -X main.version="+version+" -X main.revision=")
		}
		env := []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0", "build"}
		if len(lines) < 4 || !slices.Equal(lines[:4], env) || !slices.Contains(lines, "-trimpath") || !slices.ContainsFunc(lines, stamped) {
			t.Errorf("%s: go was run as\n%s", name, asked)
		}
	}
	slices.Sort(want)
	if got := dirNames(t, dist); !slices.Equal(got, want) {
		t.Fatalf("dist holds %v, want %v", got, want)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil || strings.Count(string(out), ": OK\n") != len(platforms) {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}

	dist = t.TempDir()
	start := time.Now()
	if out, err := exec.CommandContext(t.Context(), "nice", "-n", "19", "make", "-C", "..", "release", "DIST="+dist, "PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH).CombinedOutput(); err != nil {
		t.Fatalf("make release for this host: %v\n%s", err, out)
	}
	t.Logf("make release for this host took %v", time.Since(start).Round(time.Second))
	host := filepath.Join(dist, "lockproxy-"+version+"-"+runtime.GOOS+"-"+runtime.GOARCH)
	if got, want := dirNames(t, dist), []string{"SHA256SUMS", filepath.Base(host)}; !slices.Equal(got, want) {
		t.Fatalf("dist holds %v, want %v", got, want)
	}
	if f, err := elf.Open(host); err != nil {
		t.Fatal(err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", host)
			}
		}
		f.Close()
	}
	out, err = exec.Command(host, "-version").Output()
	line := regexp.MustCompile(`^lockproxy (\S+) \(commit (\S+), (go\S+), ` + runtime.GOOS + "/" + runtime.GOARCH + `\)\n$`).FindStringSubmatch(string(out))
	if err != nil || line == nil || line[1] != version {
		t.Fatalf("-version: %v %q, want version %s", err, out, version)
	}
	p := startBinary(t, host, "127.0.0.1:0", listeningLine, nil, "-metrics", "127.0.0.1:0")
	if info := redisCLI(t, p.Addr, "INFO", "server"); !strings.Contains(info, "\nlockproxy_version:"+version+"\r") {
		t.Errorf("INFO server does not say lockproxy_version:%s:\n%q", version, info)
	}
	series := fmt.Sprintf(`lockproxy_build_info{goversion=%q,revision=%q,version=%q}`, line[3], line[2], version)
	if v, ok := scrape(t, "http://"+p.waitLog(t, metricsLine)[1])[series]; !ok || v != 1 {
		t.Errorf("/metrics lacks %s 1", series)
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
