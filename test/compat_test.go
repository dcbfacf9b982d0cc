package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The compatibility suite runs real client libraries, unchanged, against
// the proxy. Each library has a small program in test/compat/<language>/
// that speaks one contract, whatever its language:
//
//	<program> contend ADDR LOGFILE ROUNDS WORKER
//	    takes the lock "compat:contended" ROUNDS times with the library's own
//	    lock API (retrying as the library does when it is held), and for each
//	    holding appends the line "enter WORKER-N" then "exit WORKER-N" to
//	    LOGFILE (opened O_APPEND, one write per line), then releases it.
//	    Exits 0 when every round was taken and released.
//	<program> scenario ADDR
//	    takes "compat:scenario", extends it, checks that a second owner
//	    cannot take it, that releasing it with another token is refused (as
//	    the library reports that), then releases it and checks it is free.
//	    Prints one line per check; exits non-zero with the failing check.
//
// Several contend processes run at once; checkLockLog then proves from
// LOGFILE that no two held the lock at the same time.

// compatClient is one library's program.
type compatClient struct {
	name string
	// command returns the command line that runs the program with args.
	command func(args ...string) *exec.Cmd
}

// olderRows are the rows of a library's older versions, where a row of
// its newest is in the suite too: they run with all backends up only. The
// BRIEF asks each library to work with one backend down, which the newest
// version shows; an older one shows that it speaks to the proxy as the
// newest does.
var olderRows = map[string]bool{
	"jedis-5-recipe": true, "jedis-7-recipe": true,
	"spring-integration-6-RedisLockRegistry": true, "spring-integration-6-RedisLockRegistry-PUB_SUB_LOCK": true,
	"ioredis-5-recipe": true, "node-redis-5-recipe": true, "redlock-4.2.0": true,
}

// olderRow reports whether name is a row of an older version of its
// library (olderRows, and the PyPI redis-py's below 8.1.0).
func olderRow(name string) bool {
	return olderRows[name] || olderRedisPy.MatchString(name)
}

var olderRedisPy = regexp.MustCompile(`^redis-py-[5-7]\.`)

// compatSuite runs the contention and scenario checks of each client against
// a proxy over 5 real backends, with all of them up and, but for the
// older versions of a library, with one killed.
// The two run at once, each on a cluster of its own: the clients' programs
// spend most of their time starting up and waiting out TTLs, and the test
// package has to stay well inside CI's time.
func compatSuite(t *testing.T, clients []compatClient) {
	t.Helper()
	var wg sync.WaitGroup
	for _, down := range []int{0, 1} {
		wg.Go(func() {
			t.Run(fmt.Sprintf("backends_down=%d", down), func(t *testing.T) {
				c := newCluster(t, 5)
				for i := range down {
					c.servers[i].Kill()
				}
				for _, client := range clients {
					if down > 0 && olderRow(client.name) {
						continue
					}
					t.Run(client.name, func(t *testing.T) {
						t.Run("contention", func(t *testing.T) { runContention(t, c.proxy.Addr, client, 4, 25) })
						t.Run("scenario", func(t *testing.T) { runScenario(t, c.proxy.Addr, client) })
					})
				}
			})
		})
	}
	wg.Wait()
}

// programsOnRedis runs each client's contention and scenario checks against
// one real redis-server, without the proxy: what the library does on its
// own, so that a failure through the proxy is the proxy's. The programs
// share lock names, so a server takes one client at a time; two servers,
// each with half the clients, run at once.
func programsOnRedis(t *testing.T, clients []compatClient) {
	t.Helper()
	half := (len(clients) + 1) / 2
	var wg sync.WaitGroup
	for _, part := range [][]compatClient{clients[:half], clients[half:]} {
		addr := redistest.Start(t).Addr()
		wg.Go(func() {
			for _, client := range part {
				t.Run(client.name, func(t *testing.T) {
					t.Run("contention", func(t *testing.T) { runContention(t, addr, client, 4, 25) })
					t.Run("scenario", func(t *testing.T) { runScenario(t, addr, client) })
				})
			}
		})
	}
	wg.Wait()
}

// runContention starts workers processes of client contending for one lock,
// rounds times each, and checks the log they wrote.
func runContention(t *testing.T, addr string, client compatClient, workers, rounds int) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "holders.log")
	var wg sync.WaitGroup
	outputs := make([]string, workers)
	errs := make([]error, workers)
	for w := range workers {
		cmd := client.command("contend", addr, log, fmt.Sprint(rounds), fmt.Sprint(w))
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			outputs[w], errs[w] = string(out), err
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v\n%s", w, err, outputs[w])
		}
	}
	checkLockLog(t, log, workers*rounds)
}

// checkLockLog proves from the holders' log that the lock was never held by
// two workers at once: every "enter" must follow the previous holder's
// "exit", and there must be want holdings.
func checkLockLog(t *testing.T, path string, want int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("holders' log: %v", err)
	}
	defer f.Close()
	holder, holdings := "", 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		verb, who, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch {
		case !ok:
			t.Fatalf("holders' log line %d: %q", line, sc.Text())
		case verb == "enter" && holder != "":
			t.Fatalf("holders' log line %d: %s entered while %s held the lock", line, who, holder)
		case verb == "enter":
			holder = who
			holdings++
		case verb == "exit" && who != holder:
			t.Fatalf("holders' log line %d: %s exited while %q held the lock", line, who, holder)
		case verb == "exit":
			holder = ""
		default:
			t.Fatalf("holders' log line %d: %q", line, sc.Text())
		}
	}
	if holdings != want {
		t.Fatalf("%d holdings in the log, expected %d", holdings, want)
	}
}

// runScenario runs the client's scenario program and reports its checks.
func runScenario(t *testing.T, addr string, client compatClient) {
	t.Helper()
	out, err := client.command("scenario", addr).CombinedOutput()
	t.Logf("%s scenario:\n%s", client.name, out)
	if err != nil {
		t.Fatalf("%s scenario failed: %v", client.name, err)
	}
}

// requireTool fails (never skips: a skipped compatibility row is a hidden
// failure) when a program the suite needs is missing.
func requireTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; install it with: %s", name, install)
	}
	return path
}
