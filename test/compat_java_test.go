package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// javaDir is the Maven project of the Java programs: one module per client
// library and version (its own classpath), the programs' sources shared in
// src/compat, exact versions in each module's pom.xml and what they resolve
// to locked in its dependencies.txt.
const javaDir = "compat/java"

// javaClients are the Java rows of the compatibility suite, each a main
// class of src/compat run on its module's classpath with props (system
// properties), following the contract in compat_test.go.
var javaClients = []struct {
	name, module, main string
	props              []string
}{
	{"jedis-5-recipe", "jedis-5", "compat.JedisRecipe", nil},
	{"jedis-7-recipe", "jedis-7", "compat.JedisRecipe", nil},
	{"jedis-8-recipe", "jedis-8", "compat.JedisRecipe", nil},
	{"lettuce-6-recipe-resp3", "lettuce-6", "compat.LettuceRecipe", []string{"-Dcompat.resp=3"}},
	{"lettuce-6-recipe-resp2", "lettuce-6", "compat.LettuceRecipe", []string{"-Dcompat.resp=2"}},
	{"spring-integration-6-RedisLockRegistry", "spring-integration-6", "compat.SpringLockRegistry", nil},
	{"spring-integration-7-RedisLockRegistry", "spring-integration", "compat.SpringLockRegistry", nil},
	{"spring-integration-6-RedisLockRegistry-PUB_SUB_LOCK", "spring-integration-6", "compat.SpringLockRegistry", []string{springPubSub}},
	{"spring-integration-7-RedisLockRegistry-PUB_SUB_LOCK", "spring-integration", "compat.SpringLockRegistry", []string{springPubSub}},
	{"shedlock-redis-spring-safeUpdate", "shedlock", "compat.ShedLockRedis", nil},
}

// javaProgramModules are modules of the project that are no rows of
// javaClients: their programs run scenarios of their own, with threads and
// clients inside, rather than compatSuite's contract (Redisson:
// compat_redisson_test.go). javaBuild builds and lock-checks them too.
var javaProgramModules = []string{"redisson-4", "redisson-3"}

// springPubSub runs a Spring RedisLockRegistry in its PUB_SUB_LOCK mode.
const springPubSub = "-Dcompat.spring.lockType=PUB_SUB_LOCK"

// javaFlags keep a JVM's start short: the suites start a JVM per row and
// cluster, some thirty, that each live a few seconds. C1 alone compiles soon
// enough for that, the class-data sharing archive saves loading the JDK's
// classes, and the serial collector starts no GC threads: a Spring worker's
// run, when each was a JVM of its own, dropped from about 2.7 s to 1.9 s.
var javaFlags = []string{"-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:+UseSerialGC"}

// TestCompatJava runs the Java client libraries, unchanged, through the
// proxy (compatSuite: contention and scenario, all backends up and one
// killed).
func TestCompatJava(t *testing.T) {
	clientTest(t)
	start := time.Now()
	dir := javaBuild(t)
	compatSuite(t, javaCompatClients(dir))
	t.Logf("the Java compatibility suite took %v", time.Since(start).Round(100*time.Millisecond))
}

// TestCompatJavaShedLockDefaultModeRefused shows docs/compatibility.md's "not supported
// yet" row: ShedLock's default mode extends with an unconditional
// SET k v XX PX, which ignores ownership, and lockproxy refuses it by name.
func TestCompatJavaShedLockDefaultModeRefused(t *testing.T) {
	clientTest(t)
	dir := javaBuild(t)
	c := newCluster(t, 5)
	jvm := slices.Concat(javaFlags, []string{"-Dcompat.shedlock.safeUpdate=false",
		"-cp", javaClasspath(dir, "shedlock"), "compat.ShedLockRedis", "scenario", c.proxy.Addr})
	out, err := exec.Command("java", jvm...).CombinedOutput()
	if err == nil {
		t.Fatalf("ShedLock's default mode ran through the proxy:\n%s", out)
	}
	const refusal = "lockproxy only takes locks: SET key token NX PX|EX ttl, or SET key token IFEQ token PX|EX ttl to extend (got XX)"
	if !strings.Contains(string(out), "ok lock takes the free lock") || !strings.Contains(string(out), refusal) {
		t.Fatalf("ShedLock's default mode should take the lock, then have its extension refused with %q; its output:\n%s", refusal, out)
	}
}

// TestCompatJavaShedLockTenMinutes: issue 37's acceptance with default
// settings: ShedLock (safe mode) takes and releases a lock with
// lockAtMostFor 10 minutes, a scheduled job's, which max_ttl's earlier
// default (60 s) refused.
func TestCompatJavaShedLockTenMinutes(t *testing.T) {
	clientTest(t)
	dir := javaBuild(t)
	c := newCluster(t, 5)
	jvm := slices.Concat(javaFlags, []string{"-cp", javaClasspath(dir, "shedlock"), "compat.ShedLockRedis", "atmostfor", c.proxy.Addr, "PT10M"})
	out, err := exec.Command("java", jvm...).CombinedOutput()
	t.Logf("ShedLock, lockAtMostFor 10 minutes:\n%s", out)
	if err != nil {
		t.Fatalf("ShedLock with lockAtMostFor 10 minutes: %v", err)
	}
	if !strings.Contains(string(out), "ok unlock by the owner frees the key") {
		t.Fatalf("ShedLock exited 0 without releasing the lock")
	}
}

// TestCompatJavaProgramsOnRedis runs every Java program against one real
// redis-server: what the library does without the proxy, so that a failure
// through the proxy is the proxy's.
func TestCompatJavaProgramsOnRedis(t *testing.T) {
	clientTest(t)
	programsOnRedis(t, javaCompatClients(javaBuild(t)))
}

// javaCompatClients are javaClients as compatClients of the project built in
// dir.
func javaCompatClients(dir string) []compatClient {
	clients := make([]compatClient, len(javaClients))
	for i, c := range javaClients {
		clients[i] = compatClient{name: c.name, command: func(args ...string) *exec.Cmd {
			jvm := slices.Concat(javaFlags, c.props, []string{"-cp", javaClasspath(dir, c.module), c.main}, args)
			return exec.Command("java", jvm...)
		}}
	}
	return clients
}

// javaClasspath is the classpath of module in the project built in dir: its
// classes and the jars dependency:copy-dependencies put in target/lib.
func javaClasspath(dir, module string) string {
	return filepath.Join(dir, module, "target", "classes") + string(os.PathListSeparator) +
		filepath.Join(dir, module, "target", "lib", "*")
}

// javaBuild checks for java and mvn, builds the Maven project unless its
// build is newer than every pom.xml and source, and checks that what Maven
// resolved is what each module's dependencies.txt locks. Maven's local
// repository is javaDir/.m2, inside the clone: CI caches nothing outside it.
// It returns the absolute path of the project.
func javaBuild(t *testing.T) string {
	t.Helper()
	preparing.Lock() // client tests run side by side: one build at a time
	defer preparing.Unlock()
	requireTool(t, "java", "apt-get install -y openjdk-17-jdk-headless (Java 17 or later)")
	mvn := requireTool(t, "mvn", "apt-get install -y maven")
	dir, err := filepath.Abs(javaDir)
	if err != nil {
		t.Fatal(err)
	}
	modules := make([]string, 0, len(javaClients)+len(javaProgramModules))
	for _, c := range javaClients {
		if !slices.Contains(modules, c.module) {
			modules = append(modules, c.module)
		}
	}
	modules = append(modules, javaProgramModules...)
	if !javaBuildFresh(t, dir, modules) {
		start := time.Now()
		cmd := exec.Command(mvn, "-B", "-q", "-Dmaven.repo.local="+filepath.Join(dir, ".m2"), "process-classes")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mvn process-classes in %s: %v\n%s", javaDir, err, out)
		}
		t.Logf("mvn process-classes in %s took %v", javaDir, time.Since(start).Round(100*time.Millisecond))
	}
	for _, m := range modules {
		locked := dependencyLines(t, filepath.Join(dir, m, "dependencies.txt"))
		resolved := dependencyLines(t, filepath.Join(dir, m, "target", "dependencies.txt"))
		if !slices.Equal(locked, resolved) {
			t.Fatalf("%s/%s: Maven resolved\n%s\nbut dependencies.txt locks\n%s\n(after an intended change of its pom.xml, copy target/dependencies.txt over dependencies.txt)",
				javaDir, m, strings.Join(resolved, "\n"), strings.Join(locked, "\n"))
		}
	}
	return dir
}

// javaBuildFresh tells whether every module's build (its resolved list,
// written last) is newer than the project's pom.xml files and sources. It
// stats them all, so that go test's cache also sees an edit to one.
func javaBuildFresh(t *testing.T, dir string, modules []string) bool {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join(dir, "src", "compat", "*.java"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no programs in %s/src/compat: %v", javaDir, err)
	}
	inputs = append(inputs, filepath.Join(dir, "pom.xml"))
	for _, m := range modules {
		inputs = append(inputs, filepath.Join(dir, m, "pom.xml"), filepath.Join(dir, m, "dependencies.txt"))
	}
	var newest time.Time
	for _, f := range inputs {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.ModTime().After(newest) {
			newest = st.ModTime()
		}
	}
	for _, m := range modules {
		st, err := os.Stat(filepath.Join(dir, m, "target", "dependencies.txt"))
		if err != nil || !st.ModTime().After(newest) {
			return false
		}
	}
	return true
}

// dependencyLines reads the dependency lines of a Maven dependency:list
// file: its header and blank lines do not count.
func dependencyLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasSuffix(line, ":") {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestCompatJavaSpringPubSubAcrossProxies runs Spring Integration's
// RedisLockRegistry in PUB_SUB_LOCK mode, both lines, across two proxies on
// the same five backends, with all of them up and with one killed:
// threads of a registry on each proxy contend for one key (no two holders,
// every holding counted), then a waiter on proxy B is woken by an unlock
// through proxy A, which it hears only as the proxy's unlock message: without
// it, it would sleep out expireAfter (60 s) before trying again.
func TestCompatJavaSpringPubSubAcrossProxies(t *testing.T) {
	clientTest(t)
	dir := javaBuild(t)
	for _, down := range []int{0, 1} {
		t.Run(fmt.Sprintf("backends_down=%d", down), func(t *testing.T) {
			c, b := twoProxies(t, 5)
			for i := range down {
				c.servers[i].Kill()
			}
			for _, module := range []string{"spring-integration-6", "spring-integration"} {
				t.Run(module, func(t *testing.T) {
					java := func(args ...string) *exec.Cmd {
						return exec.Command("java", slices.Concat(javaFlags, []string{springPubSub,
							"-cp", javaClasspath(dir, module), "compat.SpringPubSub"}, args)...)
					}
					const rounds, threads = 10, 4
					log := filepath.Join(t.TempDir(), "holders.log")
					start := time.Now()
					out, err := java("contend", c.proxy.Addr, b.Addr, log, fmt.Sprint(rounds), fmt.Sprint(threads)).CombinedOutput()
					if err != nil {
						t.Fatalf("contend: %v\n%s", err, out)
					}
					checkLockLog(t, log, 2*threads*rounds)
					t.Logf("%d holdings by %d threads on two proxies in %v: %s", 2*threads*rounds, 2*threads, time.Since(start).Round(time.Millisecond), out)
					before := b.Client(t).Info(t.Context(), "pubsub").Val()
					// expireAfter 60 s: a waiter that missed the message
					// sleeps it out, and the program fails any wake later
					// than a tenth of it, 6 s; a JVM's first wake, on a
					// machine busy with three more client tests, once
					// took 3.3 s.
					out, err = java("wake", c.proxy.Addr, b.Addr, "10", "60000").CombinedOutput()
					if err != nil {
						t.Fatalf("wake: %v\n%s", err, out)
					}
					t.Logf("wake-up through the other proxy:\n%s", out)
					after := b.Client(t).Info(t.Context(), "pubsub").Val()
					if d := infoField(t, after, "pubsub_messages_delivered") - infoField(t, before, "pubsub_messages_delivered"); d < 10 {
						t.Fatalf("proxy B delivered %d unlock messages for 10 unlocks through A", d)
					}
				})
			}
		})
	}
}

// infoField reads an integer field of an INFO reply.
func infoField(t *testing.T, info, field string) int {
	t.Helper()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO %s: %q", field, v)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s:\n%s", field, info)
	return 0
}
