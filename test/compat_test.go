package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
//	<program> suite ADDR LOGFILE ROUNDS WORKERS
//	    runs WORKERS contend workers at once in the one process, workers
//	    0 to WORKERS-1, each with a client of its own, so that the proxy sees
//	    WORKERS clients as it would WORKERS processes; once they have all
//	    finished, runs the scenario checks. ADDR may be several addresses,
//	    comma-separated: worker W connects to the (W mod n)th, the scenario
//	    to the first. Prints each failed worker's error and the scenario's
//	    lines; exits 0 when every worker and every check passed.
//
// The suite is what the tests run: a JVM or an interpreter costs a second
// or two of CPU to start, and starting one per worker made the suite's
// hundreds of starts most of its time. Where a language has no threads to
// spare (PHP, Perl, the shell), suite forks or spawns its workers instead.
// checkLockLog then proves from LOGFILE that no two workers held the lock
// at the same time.

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

// compatSuite runs each client's suite (contention, then scenario) against a
// proxy over 5 real backends, with all of them up and, but for the older
// versions of a library, with one killed.
// The two run at once, each on clusters of their own: the clients' programs
// spend most of their time waiting out TTLs, not on the CPU. The programs
// share lock names, so a cluster takes one client at a time; a long list
// of rows is split between two clusters.
func compatSuite(t *testing.T, clients []compatClient) {
	t.Helper()
	var wg sync.WaitGroup
	for _, down := range []int{0, 1} {
		var rows []compatClient
		for _, client := range clients {
			if down == 0 || !olderRow(client.name) {
				rows = append(rows, client)
			}
		}
		wg.Go(func() {
			t.Run(fmt.Sprintf("backends_down=%d", down), func(t *testing.T) {
				parts := [][]compatClient{rows}
				if half := (len(rows) + 1) / 2; len(rows) >= 12 {
					parts = [][]compatClient{rows[:half], rows[half:]}
				}
				var clusters sync.WaitGroup
				for _, part := range parts {
					c := newCluster(t, 5)
					for i := range down {
						c.servers[i].Kill()
					}
					clusters.Go(func() {
						for _, client := range part {
							t.Run(client.name, func(t *testing.T) { runSuite(t, c.proxy.Addr, client, nil) })
						}
					})
				}
				clusters.Wait()
			})
		})
	}
	wg.Wait()
}

// programsOnRedis runs each client's suite against one real redis-server,
// without the proxy: what the library does on its own, so that a failure
// through the proxy is the proxy's. The programs share lock names, so a
// server takes one client at a time; two servers, each with half the
// clients, run at once.
func programsOnRedis(t *testing.T, clients []compatClient) {
	t.Helper()
	half := (len(clients) + 1) / 2
	var wg sync.WaitGroup
	for _, part := range [][]compatClient{clients[:half], clients[half:]} {
		addr := redistest.Start(t).Addr()
		wg.Go(func() {
			for _, client := range part {
				t.Run(client.name, func(t *testing.T) { runSuite(t, addr, client, nil) })
			}
		})
	}
	wg.Wait()
}

// The contention of every suite: 4 workers taking the lock 25 times each.
const suiteWorkers, suiteRounds = 4, 25

// runSuite runs client's suite program against addr (comma-separated
// addresses seed the workers in turn) with env added to its environment,
// and checks the holders' log it wrote: every round of every worker held
// the lock, never two at once.
func runSuite(t *testing.T, addr string, client compatClient, env []string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "holders.log")
	cmd := client.command("suite", addr, log, strconv.Itoa(suiteRounds), strconv.Itoa(suiteWorkers))
	if len(env) > 0 {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, env...)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s suite:\n%s", client.name, out)
	if err != nil {
		t.Errorf("%s suite failed: %v", client.name, err)
		// Still prove the holdings so far never overlapped: an overlap is
		// the worse failure, whatever stopped the workers.
		if logged, err := os.ReadFile(log); err == nil {
			checkLockLog(t, log, strings.Count(string(logged), "enter "))
		}
		t.FailNow()
	}
	held := checkLockLog(t, log, suiteWorkers*suiteRounds)
	for w := range suiteWorkers {
		for n := range suiteRounds {
			if who := fmt.Sprintf("%d-%d", w, n); !held[who] {
				t.Fatalf("holders' log: worker %d never held the lock in round %d", w, n)
			}
		}
	}
}

// checkLockLog proves from the holders' log that the lock was never held by
// two workers at once: every "enter" must follow the previous holder's
// "exit", no holding may be entered twice, and there must be want
// holdings. It returns the holdings ("W-N") it read.
func checkLockLog(t *testing.T, path string, want int) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("holders' log: %v", err)
	}
	defer f.Close()
	holder, held := "", map[string]bool{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		verb, who, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch {
		case !ok:
			t.Fatalf("holders' log line %d: %q", line, sc.Text())
		case verb == "enter" && holder != "":
			t.Fatalf("holders' log line %d: %s entered while %s held the lock", line, who, holder)
		case verb == "enter" && held[who]:
			// Else a holding logged twice (or two workers sharing an id)
			// would make up for one never logged.
			t.Fatalf("holders' log line %d: %s entered a second time", line, who)
		case verb == "enter":
			holder = who
			held[who] = true
		case verb == "exit" && who != holder:
			t.Fatalf("holders' log line %d: %s exited while %q held the lock", line, who, holder)
		case verb == "exit":
			holder = ""
		default:
			t.Fatalf("holders' log line %d: %q", line, sc.Text())
		}
	}
	if holder != "" {
		t.Fatalf("holders' log: %s entered and never exited", holder)
	}
	if len(held) != want {
		t.Fatalf("%d holdings in the log, expected %d", len(held), want)
	}
	return held
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
