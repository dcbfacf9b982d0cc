package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// nodeDir holds the Node programs of the compatibility suite, with the
// client libraries pinned in package.json and package-lock.json.
const nodeDir = "compat/node"

// nodeClients are the Node rows of the compatibility suite: one program
// each, following the contract in compat_test.go. The versions are pinned in
// compat/node/package.json.
var nodeClients = []struct{ name, program string }{
	{"ioredis-5-recipe", "ioredis-recipe.js"},
	{"ioredis-6-recipe", "ioredis6-recipe.js"},
	{"node-redis-5-recipe", "node-redis-recipe.js"},
	{"node-redis-6-recipe", "redis6-recipe.js"},
	{"redis-semaphore-5.8.0-mutex", "redis-semaphore-mutex.js"},
	{"redlock-4.2.0", "redlock4.js"},
	{"redlock-5.0.0-beta.2", "redlock5.js"},
	{"sesamecare-redlock-1.4.0", "sesamecare-redlock.js"},
}

// TestCompatNode runs the Node client libraries, unchanged, through the proxy
// (compatSuite: contention and scenario, all backends up and one killed).
func TestCompatNode(t *testing.T) {
	clientTest(t)
	dir := nodeModules(t)
	clients := make([]compatClient, len(nodeClients))
	for i, c := range nodeClients {
		clients[i] = nodeClient(dir, c.name, c.program)
	}
	compatSuite(t, clients)
}

// TestCompatNodeProgramsOnRedis runs every Node program against one real
// redis-server: what the library does without the proxy, so that a failure
// through the proxy is the proxy's.
func TestCompatNodeProgramsOnRedis(t *testing.T) {
	clientTest(t)
	dir := nodeModules(t)
	var clients []compatClient
	for _, c := range nodeClients {
		clients = append(clients, nodeClient(dir, c.name, c.program))
	}
	programsOnRedis(t, clients)
}

// nodeClient is the compatClient that runs program with node in dir.
func nodeClient(dir, name, program string) compatClient {
	return compatClient{
		name: name,
		command: func(args ...string) *exec.Cmd {
			cmd := exec.Command("node", append([]string{program}, args...)...)
			cmd.Dir = dir
			return cmd
		},
	}
}

// nodeModules checks for node and npm and installs the pinned libraries with
// npm ci unless node_modules already matches package-lock.json (npm ci
// writes node_modules/.package-lock.json, newer than the lockfile it
// installed). It returns the absolute path of the programs' folder.
func nodeModules(t *testing.T) string {
	t.Helper()
	preparing.Lock()
	defer preparing.Unlock()
	requireTool(t, "node", "apt-get install nodejs (Node 20 or later)")
	npm := requireTool(t, "npm", "apt-get install npm")
	dir, err := filepath.Abs(nodeDir)
	if err != nil {
		t.Fatal(err)
	}
	// Stat the programs so that go test's cache sees an edit to one of them
	// (it tracks the files the test opens or stats, not what node reads).
	programs, err := filepath.Glob(filepath.Join(dir, "*.js"))
	if err != nil || len(programs) == 0 {
		t.Fatalf("no programs in %s: %v", dir, err)
	}
	for _, p := range programs {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err == nil {
		fresh := true
		for _, f := range []string{"package.json", "package-lock.json"} {
			st, err := os.Stat(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			fresh = fresh && installed.ModTime().After(st.ModTime())
		}
		if fresh {
			return dir
		}
	}
	start := time.Now()
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	t.Logf("npm ci in %s took %v", nodeDir, time.Since(start).Round(time.Millisecond))
	return dir
}
