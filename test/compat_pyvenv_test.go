package test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pyDir holds the Python programs of the compatibility suite and, in
// requirements/, one lock per virtual environment: NAME.in names the
// library's pinned version, NAME.txt (pip-compile --generate-hashes NAME.in)
// pins every package with its hashes. The test set-up makes each
// environment in pyDir/.venv-NAME (ignored by git), so nothing is cached
// outside the clone.
const pyDir = "compat/python"

// pyClient is one row of the PyPI clients: a program run by the Python of
// one virtual environment, with env added to its environment.
type pyClient struct {
	name, venv, program string
	env                 []string
}

// pyClients are the Python rows of the compatibility suite whose libraries
// come from PyPI. redispy_lock.py and redispy_asyncio_lock.py take the
// protocol from REDISPY_PROTOCOL (2, redis-py's default, or 3).
var pyClients = func() []pyClient {
	var out []pyClient
	for _, v := range []struct{ venv, version string }{
		{"redis5", "5.3.1"}, {"redis6", "6.4.0"}, {"redis7", "7.4.1"}, {"redis8", "8.1.0"},
	} {
		for _, protocol := range []string{"2", "3"} {
			env := []string{"REDISPY_PROTOCOL=" + protocol}
			out = append(out,
				pyClient{fmt.Sprintf("redis-py-%s-Lock-resp%s", v.version, protocol), v.venv, "redispy_lock.py", env},
				pyClient{fmt.Sprintf("redis-py-%s-asyncio-Lock-resp%s", v.version, protocol), v.venv, "redispy_asyncio_lock.py", env},
			)
		}
	}
	// redis-py's WATCH recipe (pipeline, watch, multi, execute), which the
	// proxy serves as one quorum compare-and-delete or compare-and-pexpire:
	// the oldest and newest redis-py, each protocol.
	for _, v := range []struct{ venv, version string }{{"redis5", "5.3.1"}, {"redis8", "8.1.0"}} {
		for _, protocol := range []string{"2", "3"} {
			out = append(out, pyClient{fmt.Sprintf("redis-py-%s-watch-recipe-resp%s", v.version, protocol), v.venv,
				"redispy_watch.py", []string{"REDISPY_PROTOCOL=" + protocol}})
		}
	}
	// python-redis-lock waits in BLPOP lock-signal:<name>, in either
	// protocol; with expire=None its lock has no TTL, which lockproxy makes
	// session-bound.
	for _, protocol := range []string{"2", "3"} {
		out = append(out, pyClient{"python-redis-lock-4.0.1-resp" + protocol, "pyredislock", "pyredislock.py",
			[]string{"REDISPY_PROTOCOL=" + protocol}})
	}
	out = append(out, pyClient{"python-redis-lock-4.0.1-expire-None", "pyredislock", "pyredislock.py",
		[]string{"PYREDISLOCK_EXPIRE=none"}})
	return append(out,
		pyClient{name: "pottery-3.0.1-Redlock", venv: "pottery", program: "pottery_redlock.py"},
		pyClient{name: "aioredlock-0.7.3", venv: "aioredlock", program: "aioredlock_lock.py"},
	)
}()

// TestCompatPyPI runs the PyPI Python client libraries, unchanged, through
// the proxy (compatSuite: contention and scenario, all backends up and one
// killed).
func TestCompatPyPI(t *testing.T) {
	clientTest(t)
	clients := pyPIClients(t)
	start := time.Now()
	compatSuite(t, clients)
	t.Logf("the PyPI clients' suite took %v", time.Since(start).Round(time.Millisecond))
}

// TestCompatPyPIProgramsOnRedis runs every PyPI client's program against one
// real redis-server: what the library does without the proxy, so that a
// failure through the proxy is the proxy's.
func TestCompatPyPIProgramsOnRedis(t *testing.T) {
	clientTest(t)
	programsOnRedis(t, pyPIClients(t))
}

// pyPIClients prepares the virtual environments and returns the clients
// that run in them.
func pyPIClients(t *testing.T) []compatClient {
	t.Helper()
	python, interpreter, dir := pyInterpreter(t)
	start := time.Now()
	pythons := map[string]string{}
	for _, c := range pyClients {
		if pythons[c.venv] == "" {
			pythons[c.venv] = pyVenv(t, python, interpreter, dir, c.venv)
		}
	}
	t.Logf("the virtual environments were ready in %v", time.Since(start).Round(time.Millisecond))
	clients := make([]compatClient, len(pyClients))
	for i, c := range pyClients {
		program := filepath.Join(dir, c.program)
		// Stat the program so that go test's cache sees an edit to it (it
		// tracks the files the test opens or stats, not what python reads).
		if _, err := os.Stat(program); err != nil {
			t.Fatal(err)
		}
		clients[i] = compatClient{name: c.name, command: func(args ...string) *exec.Cmd {
			cmd := exec.Command(pythons[c.venv], append([]string{program}, args...)...)
			// No __pycache__ beside the programs, and no user site-packages
			// leaking into the pinned environment.
			cmd.Env = append(os.Environ(), append([]string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1"}, c.env...)...)
			return cmd
		}}
	}
	return clients
}

// pyInterpreter returns python3's path, its description for the
// environments' stamps, and pyDir's absolute path.
func pyInterpreter(t *testing.T) (python, interpreter, dir string) {
	t.Helper()
	dir, err := filepath.Abs(pyDir)
	if err != nil {
		t.Fatal(err)
	}
	python = requirePythonVenv(t)
	out, err := exec.Command(python, "-c", "import sys; print(sys.executable, sys.version)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", python, err, out)
	}
	return python, string(out), dir
}

// requirePythonVenv fails (never skips) unless python3 has the venv module
// and a pip that installs into another environment (--python, pip 22.3 and
// later), and returns python3's path.
func requirePythonVenv(t *testing.T) string {
	t.Helper()
	const install = "apt-get install -y python3 python3-venv python3-pip"
	python := requireTool(t, "python3", install)
	probes := [][]string{
		{"-c", "import venv"},
		{"-m", "pip", "--python", python, "--version"},
	}
	for _, probe := range probes {
		if out, err := exec.Command(python, probe...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v: %s; install venv and pip 22.3 or later with: %s",
				python, strings.Join(probe, " "), err, strings.TrimSpace(string(out)), install)
		}
	}
	return python
}

// pyVenv returns the Python of the virtual environment pyDir/.venv-NAME,
// made by python from requirements/NAME.txt in pip's hash-checking mode.
// An environment is made again only when its stamp differs: the lock's
// hash and interpreter (python's path and version, since an environment
// keeps links to the interpreter that made it).
func pyVenv(t *testing.T, python, interpreter, dir, name string) string {
	t.Helper()
	preparing.Lock()
	defer preparing.Unlock()
	venv := filepath.Join(dir, ".venv-"+name)
	lock := filepath.Join(dir, "requirements", name+".txt")
	venvPython := filepath.Join(venv, "bin", "python")
	stampPath := filepath.Join(venv, "lockproxy-requirements.stamp")
	content, err := os.ReadFile(lock)
	if err != nil {
		t.Fatalf("the lock of a virtual environment: %v", err)
	}
	sum := sha256.Sum256(content)
	stamp := fmt.Sprintf("requirements %s\npython %s", hex.EncodeToString(sum[:]), interpreter)
	if old, err := os.ReadFile(stampPath); err == nil && string(old) == stamp {
		return venvPython
	}
	start := time.Now()
	// --clear: a half-made environment (an install that failed) is not
	// trusted; its stamp is written only after pip succeeded. python3's own
	// pip installs into it (--python), which is quicker than putting a pip
	// in each environment.
	if out, err := exec.Command(python, "-m", "venv", "--clear", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv %s: %v\n%s", venv, err, out)
	}
	// --require-hashes: every package, transitive ones too, must be pinned
	// with its hash, and --no-deps keeps pip from resolving anything the
	// lock does not name. --no-cache-dir: nothing is kept outside the clone.
	pip := exec.Command(python, "-m", "pip", "--python", venvPython, "install", "--require-hashes", "--no-deps",
		"--no-cache-dir", "--disable-pip-version-check", "--no-input", "-q", "-r", lock)
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install -r %s into %s: %v\n%s", lock, venv, err, out)
	}
	if err := os.WriteFile(stampPath, []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("made %s from %s in %v", filepath.Base(venv), filepath.Base(lock), time.Since(start).Round(time.Millisecond))
	return venvPython
}
