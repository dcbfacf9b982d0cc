package compat;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The compatibility contract of test/compat_test.go, shared by every Java program:
 *
 * <pre>
 *   java compat.Program contend ADDR LOGFILE ROUNDS WORKER
 *   java compat.Program scenario ADDR
 *   java compat.Program suite ADDR LOGFILE ROUNDS WORKERS
 * </pre>
 */
final class Contract {
    static final String CONTENDED = "compat:contended";
    static final String SCENARIO = "compat:scenario";
    // The contract's TTL while contending: far longer than a holding, so that
    // a lock only ever ends by its release.
    static final long CONTEND_TTL_MS = 10_000;

    // The redis.io recipe's compare-and-delete (release) and
    // compare-and-pexpire (extend) scripts, as applications copy them.
    static final String RELEASE = """
            if redis.call("get", KEYS[1]) == ARGV[1] then
                return redis.call("del", KEYS[1])
            else
                return 0
            end
            """;
    static final String EXTEND = """
            if redis.call("get", KEYS[1]) == ARGV[1] then
                return redis.call("pexpire", KEYS[1], ARGV[2])
            else
                return 0
            end
            """;

    private Contract() {}

    /**
     * What a program does; each method throws to fail the program. suite calls
     * contend from several threads at once, so a program keeps no client in
     * its fields: each call makes its own.
     */
    interface Program {
        void contend(String addr, HoldersLog log, int rounds, String worker) throws Exception;

        void scenario(String addr) throws Exception;
    }

    /**
     * Runs program with the contract's arguments and exits: 0 on success, 1
     * with the failure printed, 2 on a usage error. It exits rather than
     * returns because client libraries leave non-daemon threads (Netty event
     * loops, schedulers) that would keep the JVM up.
     */
    static void main(String[] args, Program program) {
        run(() -> {
            if (args.length == 5 && args[0].equals("contend")) {
                try (HoldersLog log = new HoldersLog(args[2], args[4])) {
                    program.contend(args[1], log, Integer.parseInt(args[3]), args[4]);
                }
            } else if (args.length == 2 && args[0].equals("scenario")) {
                program.scenario(args[1]);
            } else if (args.length == 5 && args[0].equals("suite")) {
                suite(program, args[1].split(","), args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            } else {
                System.err.println("usage: contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS");
                System.exit(2);
            }
        });
    }

    /**
     * The suite: workers threads contend as contend processes would, each
     * with the client its contend call makes, worker w through
     * addrs[w % addrs.length]; then the scenario runs through addrs[0],
     * whatever the workers did, so that one run reports both. A JVM per
     * worker cost about two seconds of CPU to start, which made up most of
     * the compatibility suite's time.
     */
    static void suite(Program program, String[] addrs, String logPath, int rounds, int workers) throws Exception {
        List<Thread> threads = new ArrayList<>();
        AtomicInteger failures = new AtomicInteger();
        for (int w = 0; w < workers; w++) {
            String worker = String.valueOf(w);
            String addr = addrs[w % addrs.length];
            threads.add(new Thread(() -> {
                try (HoldersLog log = new HoldersLog(logPath, worker)) {
                    program.contend(addr, log, rounds, worker);
                } catch (Throwable e) {
                    failures.incrementAndGet();
                    // Printed at once, whole: the other workers' failures
                    // follow, each under its worker's name.
                    var text = new java.io.StringWriter();
                    e.printStackTrace(new java.io.PrintWriter(text));
                    System.err.print("FAIL worker " + worker + ": " + text);
                }
            }, "worker-" + worker));
        }
        threads.forEach(Thread::start);
        for (Thread t : threads) {
            t.join();
        }
        program.scenario(addrs[0]);
        if (failures.get() > 0) {
            throw new AssertionError(failures.get() + " of " + workers + " workers failed");
        }
    }

    /**
     * Starts the threads, waits for them all, and throws the first failure that
     * one of them recorded in failed, as who's.
     */
    static void startAndJoin(java.util.List<Thread> workers, java.util.concurrent.atomic.AtomicReference<Throwable> failed,
            String who) throws InterruptedException {
        workers.forEach(Thread::start);
        for (Thread w : workers) {
            w.join();
        }
        if (failed.get() != null) {
            throw new AssertionError(who + " failed", failed.get());
        }
    }

    /** Runs a program's work and exits as main does: 0, or 1 with the failure printed. */
    static void run(ThrowingAction work) {
        int code;
        try {
            work.run();
            code = 0;
        } catch (Throwable e) {
            System.out.flush();
            System.err.print("FAIL ");
            e.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(code);
    }

    /**
     * The holders' log: "enter W-n" and "exit W-n" lines, each in one write
     * to a file opened for appending (O_APPEND), so that the lines of
     * concurrent workers interleave whole, in the order they were written.
     */
    static final class HoldersLog implements AutoCloseable {
        private final FileOutputStream out;
        private final String worker;

        HoldersLog(String path, String worker) throws IOException {
            this.out = new FileOutputStream(path, true);
            this.worker = worker;
        }

        void enter(int n) throws IOException {
            write("enter " + worker + "-" + n + "\n");
        }

        void exit(int n) throws IOException {
            write("exit " + worker + "-" + n + "\n");
        }

        private void write(String line) throws IOException {
            out.write(line.getBytes(StandardCharsets.UTF_8));
        }

        @Override
        public void close() throws IOException {
            out.close();
        }
    }

    static String host(String addr) {
        return addr.substring(0, colon(addr));
    }

    static int port(String addr) {
        return Integer.parseInt(addr.substring(colon(addr) + 1));
    }

    private static int colon(String addr) {
        int i = addr.lastIndexOf(':');
        if (i < 0) {
            throw new IllegalArgumentException("address " + addr + " is not host:port");
        }
        return i;
    }

    /**
     * The recipe's contend loop: rounds times, take the contended lock with
     * a fresh token (take answers whether it did), backing off while it is
     * held, log the holding, and release it, which must answer 1.
     */
    static void contendRounds(HoldersLog log, int rounds, java.util.function.Predicate<String> take,
            java.util.function.Function<String, Object> release) throws Exception {
        for (int n = 0; n < rounds; n++) {
            String me = token();
            while (!take.test(me)) {
                backOff();
            }
            log.enter(n);
            hold();
            log.exit(n);
            Object released = release.apply(me);
            if (!Long.valueOf(1).equals(released)) {
                throw new IllegalStateException("round " + n + ": release replied " + released + ", expected 1");
            }
        }
    }

    /**
     * The lockproxy instances of a cluster-mode run, host:port each, from
     * LOCKPROXY_CLUSTER_NODES (test/cluster_test.go's clusterSuite sets it),
     * sorted.
     */
    static java.util.List<String> clusterNodes() {
        String nodes = System.getenv("LOCKPROXY_CLUSTER_NODES");
        if (nodes == null || nodes.isEmpty()) {
            throw new IllegalStateException("LOCKPROXY_CLUSTER_NODES is not set");
        }
        return java.util.Arrays.stream(nodes.split(",")).sorted().toList();
    }

    static String token() {
        return UUID.randomUUID().toString();
    }

    /** Holds the lock 1 to 5 ms, long enough for a second holder to show. */
    static void hold() throws InterruptedException {
        Thread.sleep(1 + ThreadLocalRandom.current().nextInt(5));
    }

    /** Waits 1 to 5 ms before trying a held lock again. */
    static void backOff() throws InterruptedException {
        Thread.sleep(1 + ThreadLocalRandom.current().nextInt(5));
    }

    /** Prints "ok NAME", or throws naming the check and what was seen. */
    static void check(String name, boolean ok, Object got) {
        if (!ok) {
            throw new AssertionError("check \"" + name + "\" failed: got " + describe(got));
        }
        System.out.println("ok " + name);
    }

    /** Checks that got equals want. */
    static void expect(String name, Object want, Object got) {
        check(name, Objects.equals(want, got), got);
    }

    /** Checks that action throws, and returns what it threw. */
    static Throwable expectThrows(String name, ThrowingAction action) {
        try {
            action.run();
        } catch (Exception e) {
            System.out.println("ok " + name + " (" + describe(e) + ")");
            return e;
        }
        throw new AssertionError("check \"" + name + "\" failed: nothing was thrown");
    }

    interface ThrowingAction {
        void run() throws Exception;
    }

    static String describe(Object v) {
        if (v instanceof Throwable e) {
            return e.getClass().getName() + ": " + e.getMessage();
        }
        return v instanceof String ? "\"" + v + "\"" : String.valueOf(v);
    }
}
