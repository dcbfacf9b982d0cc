package compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson's RReadWriteLock, unchanged, in single-server mode: the same
 * modules as compat.RedissonLocks, whose name and retry on a NOQUORUM it
 * shares.
 *
 * <pre>
 *   java -Dcompat.redisson.rw=ROUNDS,THREADS,WAKE_ROUNDS,HOLD_MS,fault|nofault compat.RedissonLocks suite|watchdog ADDR_A ADDR_B ...
 *   java compat.RedissonRWLocks rwcontrol ADDR_A ADDR_B ADDR_ONE ROUNDS THREADS
 *   java compat.RedissonRWLocks rwhold ADDR
 *   java compat.RedissonRWLocks rwtake ADDR READ_NAME WRITE_NAME
 * </pre>
 *
 * The suite runs in the JVM of compat.RedissonLocks' suite or watchdog,
 * after its RLock phases, when compat.redisson.rw is set: a RedissonClient
 * of its own on each address, THREADS threads of each taking the read or
 * the write lock of one name or of both of two, ROUNDS times (lock() twice
 * for re-entry, tryLock with a wait and a lease, the downgrade from write to
 * read, both names at once), each holding a few ms. One checker in this JVM
 * counts the readers and writers inside each name: a writer entering must
 * find nobody, a reader no writer, and two readers must have been inside one
 * name at once at least once (a lock that grants one holder at a time fails
 * too). A breach ends the program with "checker failed:" and exit status 3,
 * apart from any other failure's 1. Then the reads and forceUnlock() of
 * each lock, seen from the other client; then WAKE_ROUNDS times a write
 * waiter on B, blocked in lock(), is woken by A's read unlock, well before
 * A's lease; then, if HOLD_MS is not 0, A holds a read lock and a write lock
 * taken without a lease for HOLD_MS (at least three watchdog leases) while
 * B's write tryLock() fails on both, and succeeds once A unlocks. With
 * fault, the contention runs once more, and once a quarter of its holdings
 * are done it prints "rw quarter" and holds back every worker's next round
 * until a line comes on stdin: the test's cue for a fault, which the rest of
 * the holdings then go through.
 * rwcontrol: the checker's two negative controls, each of which must fail
 * it: the suite's contention with client A on ADDR_A and client B on ADDR_B
 * (two independent servers: nothing keeps A's holders from B's), then with
 * both on ADDR_ONE but every read hold taken as a write hold (a lock that
 * grants one holder at a time: never two readers). It prints both
 * "checker failed:" lines and exits 3, or 1 if either run passed.
 * rwhold: takes a read lock and a write lock (two names) with lock(), prints
 * "held READ_NAME WRITE_NAME LEASE_MS", and waits to be killed.
 * rwtake: checks that the write lock of both names is held, prints "ready",
 * and on a line from stdin (the holder was killed) tries the write lock of
 * both at once with tryLock(wait, lease), printing "took NAME" for each.
 *
 * Properties: compat.redisson.rwWatchdogMs sets the lockWatchdogTimeout of
 * this program's clients (else Redisson's default: the RLock phases keep
 * theirs); compat.redisson.deliveries=true makes the wake phase also read
 * ADDR_B's pubsub_messages_delivered, as RedissonLocks' does.
 */
public final class RedissonRWLocks {
    static final String[] CONTENDED = {RedissonLocks.name("rw-one"), RedissonLocks.name("rw-two")};
    static final String SCENARIO = RedissonLocks.name("rw-scenario");
    static final String WAKE = RedissonLocks.name("rw-wake");
    static final String WATCH_READ = RedissonLocks.name("rw-watchdog-read");
    static final String WATCH_WRITE = RedissonLocks.name("rw-watchdog-write");
    static final String HELD_READ = RedissonLocks.name("rw-held-read");
    static final String HELD_WRITE = RedissonLocks.name("rw-held-write");

    // As RedissonLocks': a wait only runs out if wake-ups are lost.
    static final long CONTEND_WAIT_MS = 20_000;
    static final long CONTEND_LEASE_MS = 10_000;
    // The wake phase's holder lease: a waiter woken only by its timer would
    // take the lock after it, far past WAKE_LIMIT_MS.
    static final long WAKE_LEASE_MS = 20_000;
    static final long WAKE_LIMIT_MS = 5_000;
    static final int CHECKER_FAILED = 3;
    static final BufferedReader STDIN = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    private RedissonRWLocks() {}

    public static void main(String[] args) {
        Contract.run(() -> {
            if (args.length == 6 && args[0].equals("rwcontrol")) {
                control(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            } else if (args.length == 2 && args[0].equals("rwhold")) {
                hold(connect(args[1]));
            } else if (args.length == 4 && args[0].equals("rwtake")) {
                take(connect(args[1]), args[2], args[3]);
            } else {
                System.err.println("usage: rwcontrol ADDR_A ADDR_B ADDR_ONE ROUNDS THREADS | rwhold ADDR"
                        + " | rwtake ADDR READ_NAME WRITE_NAME");
                System.exit(2);
            }
        });
    }

    /**
     * The suite, if compat.redisson.rw asks for it, with client A on addrA
     * and client B on addrB: RedissonLocks runs it after its own phases.
     */
    static void suiteIfAsked(String addrA, String addrB) throws Exception {
        String spec = System.getProperty("compat.redisson.rw");
        if (spec == null) {
            return;
        }
        String[] f = spec.split(",");
        if (f.length != 5 || !(f[4].equals("fault") || f[4].equals("nofault"))) {
            throw new IllegalArgumentException("compat.redisson.rw=" + spec + ": want ROUNDS,THREADS,WAKE_ROUNDS,HOLD_MS,fault|nofault");
        }
        int rounds = Integer.parseInt(f[0]), threads = Integer.parseInt(f[1]);
        RedissonClient a = connect(addrA), b = connect(addrB);
        long start = System.nanoTime();
        passOrHalt(contend(a, b, rounds, threads, false, false));
        System.out.println("rw contend took " + ms(start) + " ms");
        scenario(a, b);
        wake(a, b, addrB, Integer.parseInt(f[2]));
        long hold = Long.parseLong(f[3]);
        if (hold > 0) {
            watchdog(a, b, hold);
        }
        if (f[4].equals("fault")) {
            start = System.nanoTime();
            passOrHalt(contend(a, b, rounds, threads, true, false));
            System.out.println("rw contend through the fault took " + ms(start) + " ms");
        }
        a.shutdown();
        b.shutdown();
    }

    /** A client as RedissonLocks.connect makes one, with compat.redisson.rwWatchdogMs for its watchdog. */
    static RedissonClient connect(String addr) {
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + addr);
        String watchdog = System.getProperty("compat.redisson.rwWatchdogMs");
        if (watchdog != null) {
            config.setLockWatchdogTimeout(Long.parseLong(watchdog));
        }
        return Redisson.create(config);
    }

    /**
     * Who is inside one name, by the holders' own account: a thread enters
     * after its lock call returned and leaves before its unlock, so that
     * what the checker sees inside is always inside the lock too.
     */
    static final class Checker {
        final String name;
        private int readers, writers, maxReaders;
        private long breaches;
        private String first;

        Checker(String name) {
            this.name = name;
        }

        synchronized void enterRead(String who) {
            if (writers > 0) {
                breach(who + " entered " + name + " as a reader with " + writers + " writer(s) inside");
            }
            readers++;
            maxReaders = Math.max(maxReaders, readers);
        }

        synchronized void enterWrite(String who) {
            if (readers > 0 || writers > 0) {
                breach(who + " entered " + name + " as a writer with " + readers + " reader(s) and " + writers + " writer(s) inside");
            }
            writers++;
        }

        /** The downgrade: the writer, holding the read lock too, stays as a reader only. */
        synchronized void downgrade(String who) {
            writers--;
            if (writers > 0) {
                breach(who + " downgraded on " + name + " with " + writers + " other writer(s) inside");
            }
            readers++;
            maxReaders = Math.max(maxReaders, readers);
        }

        synchronized void exitRead() {
            readers--;
        }

        synchronized void exitWrite() {
            writers--;
        }

        private void breach(String what) {
            if (breaches++ == 0) {
                first = what;
            }
        }

        synchronized String report() {
            return name + ": " + breaches + " breaches, at most " + maxReaders + " readers inside at once"
                    + (first == null ? "" : "; first: " + first);
        }
    }

    /** Ends the program with CHECKER_FAILED and the checker's verdict, if any. */
    private static void passOrHalt(String verdict) {
        if (verdict != null) {
            System.out.println("checker failed: " + verdict);
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(CHECKER_FAILED);
        }
        System.out.println("ok the checker saw no writer beside anyone, and readers together");
    }

    private static void control(String addrA, String addrB, String addrOne, int rounds, int threads) throws Exception {
        String apart = contend(connect(addrA), connect(addrB), rounds, threads, false, false);
        String exclusive = contend(connect(addrOne), connect(addrOne), rounds, threads, false, true);
        if (apart == null || exclusive == null) {
            throw new AssertionError("the checker passed a run it must fail: " + (apart == null
                    ? "clients on two independent servers" : "every read hold taken as a write hold"));
        }
        System.out.println("checker failed: " + apart);
        System.out.println("checker failed: " + exclusive);
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(CHECKER_FAILED);
    }

    /**
     * THREADS threads of each client take the locks ROUNDS times; answers
     * the checker's verdict, null if it saw nothing wrong. With exclusive,
     * a read hold is a write hold (the negative control's one-holder lock).
     */
    private static String contend(RedissonClient a, RedissonClient b, int rounds, int threads, boolean cue, boolean exclusive)
            throws Exception {
        Checker[] checkers = {new Checker(CONTENDED[0]), new Checker(CONTENDED[1])};
        long seed = System.nanoTime();
        System.out.println("rw contention seed " + seed);
        AtomicInteger done = new AtomicInteger();
        int quarter = Math.max(1, 2 * threads * rounds / 4);
        CountDownLatch faulted = new CountDownLatch(cue ? 1 : 0);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        List<Thread> workers = new ArrayList<>();
        AtomicLong[] kinds = {new AtomicLong(), new AtomicLong(), new AtomicLong(), new AtomicLong()};
        RedissonClient[] clients = {a, b};
        for (int c = 0; c < clients.length; c++) {
            RReadWriteLock[] locks = {clients[c].getReadWriteLock(CONTENDED[0]), clients[c].getReadWriteLock(CONTENDED[1])};
            if (exclusive) {
                for (int i = 0; i < locks.length; i++) {
                    locks[i] = writeOnly(locks[i]);
                }
            }
            for (int i = 0; i < threads; i++) {
                String worker = (c == 0 ? "A" : "B") + i;
                Random random = new Random(seed + 31L * workers.size());
                workers.add(new Thread(() -> {
                    try {
                        for (int n = 0; n < rounds; n++) {
                            if (done.get() >= quarter) {
                                faulted.await();
                            }
                            String who = worker + " round " + n;
                            // The downgrade's checks need a read lock apart from the write lock.
                            int kind = exclusive ? new int[] {0, 1, 3}[random.nextInt(3)] : random.nextInt(4);
                            int one = random.nextInt(2);
                            boolean read = random.nextInt(5) < 3;
                            switch (kind) {
                                case 0 -> reentrantRound(locks[one], checkers[one], read, who);
                                case 1 -> tryLockRound(locks[one], checkers[one], read, who);
                                case 2 -> downgradeRound(locks[one], checkers[one], who);
                                default -> bothRound(locks, checkers, read, random.nextInt(5) < 3, who);
                            }
                            kinds[kind].incrementAndGet();
                            if (done.incrementAndGet() == quarter && cue) {
                                System.out.println("rw quarter");
                                System.out.flush();
                                STDIN.readLine();
                                faulted.countDown();
                            }
                        }
                    } catch (Throwable e) {
                        failed.compareAndSet(null, e);
                    }
                }));
            }
        }
        Contract.startAndJoin(workers, failed, "a worker");
        boolean breached = false, shared = false;
        for (Checker k : checkers) {
            System.out.println("checker " + k.report());
            synchronized (k) {
                breached |= k.breaches > 0;
                shared |= k.maxReaders >= 2;
            }
        }
        System.out.println("contention: " + workers.size() + " threads of two clients took a read-write lock " + rounds
                + " times each (" + kinds[0] + " re-entrant, " + kinds[1] + " tryLock, " + kinds[2] + " downgrades, "
                + kinds[3] + " of both names; " + RedissonLocks.splits.get() + " tries told NOQUORUM, "
                + RedissonLocks.hidden.get() + " errors hidden behind a NullPointerException)");
        if (breached) {
            return "holders that exclude each other were inside at once";
        }
        return shared ? null : "no two readers were ever inside one name at once";
    }

    /** rw with its read lock replaced by its write lock. */
    private static RReadWriteLock writeOnly(RReadWriteLock rw) {
        return new RReadWriteLock() {
            @Override
            public RLock readLock() {
                return rw.writeLock();
            }

            @Override
            public RLock writeLock() {
                return rw.writeLock();
            }
        };
    }

    /** lock() twice: the hold count is 2, and one unlock() leaves it held. */
    private static void reentrantRound(RReadWriteLock rw, Checker k, boolean read, String who) throws Exception {
        RLock lock = read ? rw.readLock() : rw.writeLock();
        lock(lock);
        lock(lock);
        enter(k, read, who);
        expect(who, "getHoldCount() after lock() twice", 2, lock.getHoldCount());
        holdFor(read);
        lock.unlock();
        expect(who, "getHoldCount() after one unlock()", 1, lock.getHoldCount());
        expect(who, "isHeldByCurrentThread() after one unlock()", true, lock.isHeldByCurrentThread());
        exit(k, read);
        lock.unlock();
    }

    private static void tryLockRound(RReadWriteLock rw, Checker k, boolean read, String who) throws Exception {
        RLock lock = read ? rw.readLock() : rw.writeLock();
        tryLock(lock, who);
        enter(k, read, who);
        holdFor(read);
        exit(k, read);
        lock.unlock();
    }

    /** Write, then read under it, then the write's unlock leaves the read lock held. */
    private static void downgradeRound(RReadWriteLock rw, Checker k, String who) throws Exception {
        lock(rw.writeLock());
        k.enterWrite(who);
        Contract.hold();
        lock(rw.readLock());
        k.downgrade(who);
        rw.writeLock().unlock();
        expect(who, "the read lock held after the downgrade", true, rw.readLock().isHeldByCurrentThread());
        expect(who, "the write lock let go by the downgrade", false, rw.writeLock().isHeldByCurrentThread());
        holdFor(true);
        k.exitRead();
        rw.readLock().unlock();
    }

    /** Both names at once, always the first first (no deadlock), each in its own mode. */
    private static void bothRound(RReadWriteLock[] rws, Checker[] ks, boolean read0, boolean read1, String who) throws Exception {
        RLock first = read0 ? rws[0].readLock() : rws[0].writeLock();
        RLock second = read1 ? rws[1].readLock() : rws[1].writeLock();
        lock(first);
        enter(ks[0], read0, who);
        tryLock(second, who);
        enter(ks[1], read1, who);
        holdFor(read0 && read1);
        exit(ks[1], read1);
        second.unlock();
        exit(ks[0], read0);
        first.unlock();
    }

    private static void enter(Checker k, boolean read, String who) {
        if (read) {
            k.enterRead(who);
        } else {
            k.enterWrite(who);
        }
    }

    private static void exit(Checker k, boolean read) {
        if (read) {
            k.exitRead();
        } else {
            k.exitWrite();
        }
    }

    /** A few ms; a reader a little longer, so that readers come to share. */
    private static void holdFor(boolean read) throws InterruptedException {
        Contract.hold();
        if (read) {
            Contract.hold();
        }
    }

    private static void lock(RLock lock) throws Exception {
        RedissonLocks.throughSplits(() -> {
            lock.lock();
            return null;
        });
    }

    private static void tryLock(RLock lock, String who) throws Exception {
        if (!RedissonLocks.throughSplits(() -> lock.tryLock(CONTEND_WAIT_MS, CONTEND_LEASE_MS, TimeUnit.MILLISECONDS))) {
            throw new AssertionError(who + ": tryLock gave up after its " + CONTEND_WAIT_MS
                    + " ms wait: was a waiter not woken by an unlock?");
        }
    }

    private static void expect(String who, String what, Object want, Object got) {
        if (!want.equals(got)) {
            throw new AssertionError(who + ": " + what + " is " + got + ", expected " + want);
        }
    }

    /** isLocked(), isHeldByCurrentThread(), getHoldCount() and forceUnlock() of each lock, across the clients. */
    private static void scenario(RedissonClient a, RedissonClient b) throws Exception {
        RReadWriteLock onA = a.getReadWriteLock(SCENARIO), onB = b.getReadWriteLock(SCENARIO);
        Contract.expect("readLock().isLocked() of a free lock is false", false, onB.readLock().isLocked());
        Contract.expect("writeLock().isLocked() of a free lock is false", false, onB.writeLock().isLocked());
        Contract.expect("readLock().forceUnlock() of a free lock is false", false, onB.readLock().forceUnlock());

        onA.readLock().lock(10, TimeUnit.SECONDS);
        Contract.expect("the other client's readLock().tryLock() shares the read lock", true, onB.readLock().tryLock(0, 10, TimeUnit.SECONDS));
        Contract.expect("... and its writeLock().tryLock() fails", false, onB.writeLock().tryLock());
        Contract.expect("readLock().isLocked() under two readers", true, onA.readLock().isLocked());
        Contract.expect("writeLock().isLocked() under two readers is false", false, onA.writeLock().isLocked());
        Contract.expect("isHeldByCurrentThread() for one reader", true, onA.readLock().isHeldByCurrentThread());
        Contract.expect("... and for the other", true, onB.readLock().isHeldByCurrentThread());
        Contract.expect("getHoldCount() of one reader", 1, onA.readLock().getHoldCount());
        long ttl = onB.readLock().remainTimeToLive();
        Contract.check("remainTimeToLive() is within the 10 s lease", ttl > 0 && ttl <= 10_000, ttl);
        Contract.expect("writeLock().forceUnlock() of a read-held lock is false", false, onB.writeLock().forceUnlock());
        Contract.expect("readLock().forceUnlock() of a read-held lock is true", true, onB.readLock().forceUnlock());
        Contract.expect("... and frees it", false, onA.readLock().isLocked());
        Contract.expect("... and the reader no longer holds it", false, onA.readLock().isHeldByCurrentThread());

        onA.writeLock().lock(10, TimeUnit.SECONDS);
        Contract.expect("the other client's readLock().tryLock() fails under a writer", false, onB.readLock().tryLock());
        Contract.expect("writeLock().isLocked() seen from the other client", true, onB.writeLock().isLocked());
        Contract.expect("readLock().isLocked() under a writer alone is false", false, onB.readLock().isLocked());
        onA.readLock().lock(10, TimeUnit.SECONDS);
        Contract.expect("readLock().isLocked() once the writer also reads", true, onB.readLock().isLocked());
        Contract.expect("readLock().forceUnlock() of a write-held lock is false", false, onB.readLock().forceUnlock());
        Contract.expect("writeLock().forceUnlock() of a write-held lock is true", true, onB.writeLock().forceUnlock());
        Contract.expect("... and frees it", false, onA.writeLock().isLocked());
        Contract.expect("... and the writer's own read hold with it", false, onA.readLock().isHeldByCurrentThread());
    }

    /** A write waiter on B, parked in lock(), woken by A's read unlock. */
    private static void wake(RedissonClient a, RedissonClient b, String addrB, int rounds) throws Exception {
        if (rounds == 0) {
            return;
        }
        boolean deliveries = Boolean.getBoolean("compat.redisson.deliveries");
        RLock holder = a.getReadWriteLock(WAKE).readLock(), waiter = b.getReadWriteLock(WAKE).writeLock();
        long delivered = deliveries ? RedissonLocks.delivered(addrB) : 0;
        List<Long> latencies = new ArrayList<>();
        for (int n = 0; n < rounds; n++) {
            holder.lock(WAKE_LEASE_MS, TimeUnit.MILLISECONDS);
            long lease = holder.remainTimeToLive();
            AtomicLong got = new AtomicLong();
            AtomicReference<Throwable> failed = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    waiter.lock();
                    got.set(System.nanoTime());
                    waiter.unlock();
                } catch (Throwable e) {
                    failed.set(e);
                }
            });
            t.start();
            RedissonLocks.awaitParked(t);
            long unlocked = System.nanoTime();
            holder.unlock();
            t.join(2 * WAKE_LEASE_MS);
            if (failed.get() != null) {
                throw new AssertionError("round " + n + ": the write waiter on B, woken by A's read unlock, failed", failed.get());
            }
            if (got.get() == 0) {
                throw new AssertionError("round " + n + ": the write waiter on B never got the lock");
            }
            long latencyUs = (got.get() - unlocked) / 1_000;
            latencies.add(latencyUs);
            System.out.println("rw wake round " + n + ": woken " + latencyUs + " us after the read unlock (the holder's PTTL was " + lease + " ms)");
        }
        Collections.sort(latencies);
        long max = latencies.get(latencies.size() - 1);
        System.out.println("rw wake latency us: p50 " + latencies.get(latencies.size() / 2) + " max " + max);
        Contract.check("every write waiter on B was woken by A's read unlock within " + WAKE_LIMIT_MS + " ms, its holder's lease "
                + WAKE_LEASE_MS + " ms", max < WAKE_LIMIT_MS * 1000, max + " us");
        if (deliveries) {
            long d = RedissonLocks.delivered(addrB) - delivered;
            Contract.check("B's pubsub_messages_delivered rose by at least one per read unlock through A", d >= rounds, d);
        }
    }

    /** A read hold and a write hold without a lease, kept by the watchdog for holdMs. */
    private static void watchdog(RedissonClient a, RedissonClient b, long holdMs) throws Exception {
        long lease = a.getConfig().getLockWatchdogTimeout();
        if (holdMs < 3 * lease) {
            throw new IllegalArgumentException("hold " + holdMs + " ms is not three watchdog leases of " + lease + " ms");
        }
        RLock read = a.getReadWriteLock(WATCH_READ).readLock(), write = a.getReadWriteLock(WATCH_WRITE).writeLock();
        RLock readOnB = b.getReadWriteLock(WATCH_READ).writeLock(), writeOnB = b.getReadWriteLock(WATCH_WRITE).writeLock();
        read.lock();
        write.lock();
        long start = System.nanoTime();
        long ttl = Math.max(read.remainTimeToLive(), write.remainTimeToLive());
        Contract.check("readLock().lock() and writeLock().lock() without a lease hold for the watchdog's lease",
                ttl > 0 && ttl <= lease, ttl);
        // Holding past the lease is the scenario itself: B tries throughout.
        int tries = 0;
        while (ms(start) < holdMs) {
            Thread.sleep(Math.min(250, Math.max(1, holdMs - ms(start))));
            long r = read.remainTimeToLive(), w = write.remainTimeToLive();
            if (r <= 0 || w <= 0) {
                throw new AssertionError("after " + ms(start) + " ms the PTTLs are " + r + " (read) and " + w
                        + " (write): the watchdog did not renew them");
            }
            if (readOnB.tryLock() || writeOnB.tryLock()) {
                throw new AssertionError("after " + ms(start) + " ms B's write tryLock() took a lock A holds");
            }
            tries++;
        }
        System.out.println("held " + ms(start) + " ms with a " + lease + " ms lease; B's write tryLock() failed " + tries + " times on each");
        Contract.expect("after " + holdMs + " ms A still holds the read lock", true, read.isHeldByCurrentThread());
        Contract.expect("... and the write lock", true, write.isHeldByCurrentThread());
        read.unlock();
        write.unlock();
        Contract.expect("after A's read unlock B's write tryLock() takes it", true, readOnB.tryLock());
        Contract.expect("after A's write unlock B's write tryLock() takes it", true, writeOnB.tryLock());
        readOnB.unlock();
        writeOnB.unlock();
    }

    private static void hold(RedissonClient a) throws Exception {
        a.getReadWriteLock(HELD_READ).readLock().lock();
        a.getReadWriteLock(HELD_WRITE).writeLock().lock();
        System.out.println("held " + HELD_READ + " " + HELD_WRITE + " " + a.getConfig().getLockWatchdogTimeout());
        System.out.flush();
        new CountDownLatch(1).await(); // until the test kills this JVM
    }

    private static void take(RedissonClient b, String readName, String writeName) throws Exception {
        String[] names = {readName, writeName};
        for (String n : names) {
            Contract.expect("the write lock of " + n + " is held: tryLock() fails", false, b.getReadWriteLock(n).writeLock().tryLock());
        }
        System.out.println("ready");
        System.out.flush();
        STDIN.readLine();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        List<Thread> takers = new ArrayList<>();
        for (String n : names) {
            takers.add(new Thread(() -> {
                try {
                    RLock lock = b.getReadWriteLock(n).writeLock();
                    long start = System.nanoTime();
                    if (!lock.tryLock(CONTEND_WAIT_MS, CONTEND_LEASE_MS, TimeUnit.MILLISECONDS)) {
                        throw new AssertionError("the write tryLock of " + n + " gave up after " + CONTEND_WAIT_MS + " ms");
                    }
                    System.out.println("took " + n + " after " + ms(start) + " ms");
                    System.out.flush();
                    lock.unlock();
                } catch (Throwable e) {
                    failed.compareAndSet(null, e);
                }
            }));
        }
        Contract.startAndJoin(takers, failed, "a taker");
    }

    private static long ms(long startNanos) {
        return (System.nanoTime() - startNanos) / 1_000_000;
    }
}
