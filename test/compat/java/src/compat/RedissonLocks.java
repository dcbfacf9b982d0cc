package compat;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson's RLock, unchanged, in single-server mode. One program for every
 * Redisson module: it uses only API that 3.27 and 4.x share.
 *
 * <pre>
 *   java compat.RedissonLocks suite ADDR_A ADDR_B LOGFILE ROUNDS THREADS WAKE_ROUNDS
 *   java compat.RedissonLocks watchdog ADDR_A ADDR_B HOLD_MS
 *   java compat.RedissonLocks hold ADDR
 *   java compat.RedissonLocks objects ADDR
 *   java compat.RedissonLocks refused ADDR
 *   java compat.RedissonLocks fenced ADDR_A ADDR_B ROUNDS THREADS
 * </pre>
 *
 * suite: a RedissonClient on each address (two UUIDs), THREADS threads of
 * each taking one RLock ROUNDS times (lock() twice for re-entry, or
 * tryLock with a wait), each holding logged to LOGFILE (Contract.HoldersLog);
 * then the scenario checks; then WAKE_ROUNDS times a waiter on B blocked in
 * lock() while A holds, timed from A's unlock to B's lock() returning.
 * watchdog: A takes the lock with lock() (no lease: the watchdog renews it),
 * holds it HOLD_MS, longer than the watchdog's lease, and checks that A
 * still holds it and B cannot take it, while a waiter on B blocks in lock()
 * throughout and takes the lock at A's unlock.
 * hold: takes the lock with lock(), prints "held NAME LEASE_MS", and waits to be
 * killed; the test then watches the lease run out.
 * objects: RFencedLock, RFairLock and RReadWriteLock, each step announced
 * by an "EXISTS marker:OBJECT-OP" (for reading a MONITOR of them).
 * refused: RFencedLock's and RFairLock's lock() must throw, naming the
 * object (a lockproxy without fencing refuses them by name; RReadWriteLock
 * it serves, compat.RedissonRWLocks).
 * fenced: RFencedLock through two addresses (lockproxies with fencing on):
 * ROUNDS holdings alternating between the clients, by lockAndGetToken() and
 * tryLockAndGetToken(), each token above the last holder's, a re-entry
 * answering one not below it, getToken() through the other client the
 * holder's; then THREADS threads of each client contend, and the tokens in
 * the order the holdings came are strictly increasing.
 *
 * Properties: compat.redisson.watchdogMs sets lockWatchdogTimeout (else
 * Redisson's default, 30 s); compat.redisson.deliveries=true makes the wake
 * phase also read ADDR_B's INFO pubsub, a lockproxy's pubsub_messages_delivered;
 * compat.redisson.rw makes suite and watchdog run RReadWriteLock's suite
 * after their own phases, in the same JVM (compat.RedissonRWLocks).
 */
public final class RedissonLocks {
    // Redisson's version, from its jar: in the lock names, so that runs of
    // two versions can share a server.
    static final String VERSION = Redisson.class.getPackage().getImplementationVersion();
    static final String CONTENDED = name("contended");
    static final String SCENARIO = name("scenario");
    static final String WAKE = name("wake");
    static final String WATCHDOG = name("watchdog");
    static final String HELD = name("held");

    // tryLock's wait while contending: a waiter is woken by each unlock, so
    // it only runs out if wake-ups are lost and the waiter sleeps out a
    // holder's lease (10 s for tryLock's holders, 30 s for lock()'s).
    static final long CONTEND_WAIT_MS = 20_000;
    static final long CONTEND_LEASE_MS = 10_000;
    // A woken waiter must have the lock well before any lease timer could
    // have woken it (the holder's lease is the watchdog's 30 s).
    static final long WAKE_LIMIT_MS = 5_000;

    private RedissonLocks() {}

    public static void main(String[] args) {
        Contract.run(() -> {
            if (args.length == 7 && args[0].equals("suite")) {
                RedissonClient a = connect(args[1]), b = connect(args[2]);
                long start = System.nanoTime();
                contend(a, b, args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
                System.out.println("contend took " + ms(start) + " ms");
                start = System.nanoTime();
                scenario(a, b);
                System.out.println("scenario took " + ms(start) + " ms");
                wake(a, b, args[2], Integer.parseInt(args[6]));
                RedissonRWLocks.suiteIfAsked(args[1], args[2]);
            } else if (args.length == 4 && args[0].equals("watchdog")) {
                watchdog(connect(args[1]), connect(args[2]), Long.parseLong(args[3]));
                RedissonRWLocks.suiteIfAsked(args[1], args[2]);
            } else if (args.length == 2 && args[0].equals("hold")) {
                hold(connect(args[1]));
            } else if (args.length == 2 && args[0].equals("objects")) {
                objects(connect(args[1]), connect(args[1]));
            } else if (args.length == 2 && args[0].equals("refused")) {
                refused(connect(args[1]));
            } else if (args.length == 5 && args[0].equals("fenced")) {
                fenced(connect(args[1]), connect(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            } else {
                System.err.println("usage: suite ADDR_A ADDR_B LOGFILE ROUNDS THREADS WAKE_ROUNDS | watchdog ADDR_A ADDR_B HOLD_MS"
                        + " | hold ADDR | objects ADDR | refused ADDR | fenced ADDR_A ADDR_B ROUNDS THREADS");
                System.exit(2);
            }
        });
    }

    /** A client as the Redisson documentation configures one: single server, RESP2, defaults. */
    static RedissonClient connect(String addr) {
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + addr);
        String watchdog = System.getProperty("compat.redisson.watchdogMs");
        if (watchdog != null) {
            config.setLockWatchdogTimeout(Long.parseLong(watchdog));
        }
        return Redisson.create(config);
    }

    private static void contend(RedissonClient a, RedissonClient b, String logPath, int rounds, int threads) throws Exception {
        List<Thread> workers = new ArrayList<>();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        RedissonClient[] clients = {a, b};
        for (int c = 0; c < clients.length; c++) {
            RLock lock = clients[c].getLock(CONTENDED);
            for (int i = 0; i < threads; i++) {
                String worker = (c == 0 ? "A" : "B") + i;
                workers.add(new Thread(() -> {
                    try (var log = new Contract.HoldersLog(logPath, worker)) {
                        for (int n = 0; n < rounds; n++) {
                            if (n % 2 == 0) {
                                reentrantRound(lock, log, worker, n);
                            } else {
                                tryLockRound(lock, log, worker, n);
                            }
                        }
                    } catch (Throwable e) {
                        failed.compareAndSet(null, e);
                    }
                }));
            }
        }
        Contract.startAndJoin(workers, failed, "a worker");
        System.out.println("ok " + workers.size() + " threads of two clients took the lock " + rounds + " times each ("
                + splits.get() + " tries split the backends and were told NOQUORUM, " + hidden.get()
                + " were refused with an error Redisson hid behind a NullPointerException)");
    }

    /** lock() twice: the hold count is 2, and one unlock() leaves it held. */
    private static void reentrantRound(RLock lock, Contract.HoldersLog log, String worker, int n) throws Exception {
        throughSplits(() -> {
            lock.lock();
            return null;
        });
        throughSplits(() -> {
            lock.lock();
            return null;
        });
        log.enter(n);
        expectIn(worker, n, "getHoldCount() after lock() twice", 2, lock.getHoldCount());
        expectIn(worker, n, "isHeldByCurrentThread() after lock() twice", true, lock.isHeldByCurrentThread());
        Contract.hold();
        lock.unlock();
        expectIn(worker, n, "getHoldCount() after one unlock()", 1, lock.getHoldCount());
        expectIn(worker, n, "isHeldByCurrentThread() after one unlock()", true, lock.isHeldByCurrentThread());
        log.exit(n);
        lock.unlock();
    }

    private static void tryLockRound(RLock lock, Contract.HoldersLog log, String worker, int n) throws Exception {
        boolean got = throughSplits(() -> lock.tryLock(CONTEND_WAIT_MS, CONTEND_LEASE_MS, TimeUnit.MILLISECONDS));
        if (!got) {
            throw new AssertionError(worker + " round " + n + ": tryLock gave up after its " + CONTEND_WAIT_MS
                    + " ms wait: was a waiter not woken by an unlock?");
        }
        log.enter(n);
        expectIn(worker, n, "getHoldCount() after tryLock", 1, lock.getHoldCount());
        Contract.hold();
        log.exit(n);
        lock.unlock();
    }

    private static void expectIn(String worker, int n, String what, Object want, Object got) {
        if (!want.equals(got)) {
            throw new AssertionError(worker + " round " + n + ": " + what + " is " + got + ", expected " + want);
        }
    }

    static final AtomicLong splits = new AtomicLong(), hidden = new AtomicLong();

    /**
     * Runs take again after a NOQUORUM: through two proxies, contenders can
     * split the backends so that none has a majority, and each is told
     * NOQUORUM (docs/guarantees.md), which Redisson throws as a
     * RedisException; an application tries again.
     */
    static <T> T throughSplits(Callable<T> take) throws Exception {
        for (int hiddenInARow = 0;; ) {
            try {
                return take.call();
            } catch (RuntimeException e) {
                if (noQuorum(e)) {
                    splits.incrementAndGet();
                } else if (hiddenScriptError(e) && ++hiddenInARow <= 100) {
                    hidden.incrementAndGet();
                } else {
                    throw e;
                }
                Contract.backOff();
            }
        }
    }

    private static boolean noQuorum(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause()) {
            if (c.getMessage() != null && c.getMessage().startsWith("NOQUORUM")) {
                return true;
            }
        }
        return false;
    }

    /**
     * Whether e is how Redisson 3.2x reports any error reply to a script:
     * its CommandAsyncService.handleNoSync reads ex.getCause().getMessage()
     * of an exception that has no cause, and the NullPointerException
     * replaces the reply. A NOQUORUM arrives so, its text lost; it is tried
     * again (at most 100 times in a row, so that a proxy that refuses the
     * script still fails the run).
     */
    private static boolean hiddenScriptError(Throwable e) {
        return "Unexpected exception while processing command".equals(e.getMessage())
                && e.getCause() instanceof NullPointerException;
    }

    private static void scenario(RedissonClient a, RedissonClient b) throws Exception {
        RLock onA = a.getLock(SCENARIO), onB = b.getLock(SCENARIO);
        Contract.expect("isLocked() on a free lock is false", false, onA.isLocked());
        Contract.expect("remainTimeToLive() of a free lock is -2", -2L, onA.remainTimeToLive());
        Contract.expect("forceUnlock() of a free lock is false", false, onB.forceUnlock());

        onA.lock(10, TimeUnit.SECONDS);
        Contract.expect("isLocked() seen from the other client", true, onB.isLocked());
        long ttl = onB.remainTimeToLive();
        Contract.check("remainTimeToLive() is within the 10 s lease", ttl > 0 && ttl <= 10_000, ttl);
        Contract.expect("isHeldByCurrentThread() for the holder", true, onA.isHeldByCurrentThread());
        Contract.expect("isHeldByCurrentThread() for the other client", false, onB.isHeldByCurrentThread());
        Contract.expect("tryLock() from the other client fails at once", false, onB.tryLock());

        Throwable e = Contract.expectThrows("unlock() by the other client throws", onB::unlock);
        Contract.check("... IllegalMonitorStateException", e instanceof IllegalMonitorStateException, e);
        AtomicReference<Throwable> other = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                onA.unlock();
            } catch (Throwable x) {
                other.set(x);
            }
        });
        t.start();
        t.join();
        Contract.check("unlock() by another thread of the holder's client throws IllegalMonitorStateException",
                other.get() instanceof IllegalMonitorStateException, other.get());
        Contract.expect("... and the holder still holds it", true, onA.isHeldByCurrentThread());
        Contract.expect("... once", 1, onA.getHoldCount());

        Contract.expect("forceUnlock() of a held lock is true", true, onB.forceUnlock());
        Contract.expect("... and frees it", false, onA.isLocked());
        Contract.expect("... and the holder no longer holds it", false, onA.isHeldByCurrentThread());
        e = Contract.expectThrows("unlock() by the holder after forceUnlock() throws", onA::unlock);
        Contract.check("... IllegalMonitorStateException", e instanceof IllegalMonitorStateException, e);

        // A lease ends a holding without an unlock message: the waiter's
        // tryLock wakes on its timer (the holder's PTTL) and takes the lock.
        onA.lock(500, TimeUnit.MILLISECONDS);
        long locked = System.nanoTime();
        Contract.expect("tryLock(wait 10 s) takes the lock when the holder's 500 ms lease ends", true,
                onB.tryLock(10, 10, TimeUnit.SECONDS));
        Contract.check("... not before the lease ended", ms(locked) >= 400, ms(locked) + " ms");
        Contract.expect("... and the old holder no longer holds it", false, onA.isHeldByCurrentThread());
        onB.unlock();

        // lockInterruptibly: interrupted while waiting, it throws and takes
        // nothing; woken by the unlock, it takes the lock.
        onA.lock();
        AtomicReference<Throwable> outcome = new AtomicReference<>();
        Thread waiter = new Thread(() -> {
            try {
                onB.lockInterruptibly();
                outcome.set(new AssertionError("lockInterruptibly() took a held lock"));
            } catch (Throwable x) {
                outcome.set(x);
            }
        });
        waiter.start();
        awaitParked(waiter);
        waiter.interrupt();
        waiter.join();
        Contract.check("lockInterruptibly() interrupted while waiting throws InterruptedException",
                outcome.get() instanceof InterruptedException, outcome.get());
        Contract.expect("... and the holder still holds it", true, onA.isHeldByCurrentThread());
        AtomicLong holdCount = new AtomicLong(-1);
        outcome.set(null);
        waiter = new Thread(() -> {
            try {
                onB.lockInterruptibly();
                holdCount.set(onB.getHoldCount());
                onB.unlock();
            } catch (Throwable x) {
                outcome.set(x);
            }
        });
        waiter.start();
        awaitParked(waiter);
        onA.unlock();
        waiter.join(2 * WAKE_LIMIT_MS);
        Contract.check("lockInterruptibly() takes the lock once the holder unlocks", outcome.get() == null && holdCount.get() == 1,
                outcome.get() != null ? outcome.get() : "hold count " + holdCount.get());
        Contract.expect("... and releases it", false, onA.isLocked());
    }

    /**
     * Waits until thread is parked on its lock's wake-up semaphore: Redisson's
     * lock() subscribes to the unlock channel, tries once more, then waits on
     * that semaphore for a message or the holder's PTTL. Only from then on
     * does an unlock show whether the message wakes it. Being inside the
     * semaphore's tryAcquire is not enough: a permit left over from an
     * earlier message (the previous holder's own unlock, which reaches its
     * subscription before Redisson's asynchronous UNSUBSCRIBE) returns at
     * once, so the thread must be parked there, with no permit left.
     */
    static void awaitParked(Thread thread) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            StackTraceElement[] stack = thread.getStackTrace();
            if (stack.length > 0 && stack[0].getMethodName().equals("park")
                    && Arrays.stream(stack).anyMatch(f -> f.getClassName().equals("java.util.concurrent.Semaphore"))) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the waiter did not block on the unlock channel within 10 s; its stack: "
                        + Arrays.toString(stack));
            }
            Thread.sleep(1);
        }
    }

    /** A thread blocked in lock(): when it got the lock (0 before), or what it threw. */
    record Waiter(Thread thread, AtomicLong got, AtomicReference<Throwable> failed) {}

    /**
     * Starts a thread that blocks in lock.lock(), records when it got the
     * lock, and unlocks it; returns once the thread is parked waiting.
     */
    private static Waiter parkedWaiter(RLock lock) throws InterruptedException {
        AtomicLong got = new AtomicLong();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                lock.lock();
                got.set(System.nanoTime());
                lock.unlock();
            } catch (Throwable e) {
                failed.set(e);
            }
        });
        t.start();
        awaitParked(t);
        return new Waiter(t, got, failed);
    }

    private static void wake(RedissonClient a, RedissonClient b, String addrB, int rounds) throws Exception {
        boolean deliveries = Boolean.getBoolean("compat.redisson.deliveries");
        RLock holder = a.getLock(WAKE), waiter = b.getLock(WAKE);
        long delivered = deliveries ? delivered(addrB) : 0;
        List<Long> latencies = new ArrayList<>();
        for (int n = 0; n < rounds; n++) {
            holder.lock();
            long lease = holder.remainTimeToLive();
            Waiter w = parkedWaiter(waiter);
            AtomicLong got = w.got();
            AtomicReference<Throwable> failed = w.failed();
            long unlocked = System.nanoTime();
            holder.unlock();
            w.thread().join(2 * lease);
            if (failed.get() != null) {
                // Its only contender is the holder, who released: an error
                // here (a NOQUORUM) means it was woken before the release
                // had landed on a majority.
                throw new AssertionError("round " + n + ": the waiter on B, woken by A's unlock, failed to take the lock",
                        failed.get());
            }
            if (got.get() == 0) {
                throw new AssertionError("round " + n + ": the waiter on B never got the lock");
            }
            long latencyUs = (got.get() - unlocked) / 1_000;
            latencies.add(latencyUs);
            System.out.println("round " + n + ": woken " + latencyUs + " us after the unlock (the holder's lease was " + lease + " ms)");
        }
        Collections.sort(latencies);
        long p50 = latencies.get(latencies.size() / 2), max = latencies.get(latencies.size() - 1);
        System.out.println("wake latency us: p50 " + p50 + " max " + max);
        Contract.check("every waiter on B was woken by A's unlock within " + WAKE_LIMIT_MS + " ms",
                max < WAKE_LIMIT_MS * 1000, max + " us");
        if (deliveries) {
            long d = delivered(addrB) - delivered;
            System.out.println("B delivered " + d + " messages to its subscribers for " + rounds + " unlocks through A");
            Contract.check("B's pubsub_messages_delivered rose by at least one per unlock", d >= rounds, d);
        }
    }

    /**
     * pubsub_messages_delivered from addr's INFO pubsub (a lockproxy's
     * count of messages written to its subscribers), through a socket of its
     * own: Redisson has no INFO call that reaches that section.
     */
    static long delivered(String addr) throws IOException {
        try (Socket s = new Socket(Contract.host(addr), Contract.port(addr))) {
            s.setSoTimeout(5000);
            OutputStream out = s.getOutputStream();
            out.write("*2\r\n$4\r\nINFO\r\n$6\r\npubsub\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            StringBuilder header = new StringBuilder();
            for (int c = in.read(); c != '\n'; c = in.read()) {
                if (c < 0) {
                    throw new IOException("INFO pubsub: connection closed");
                }
                header.append((char) c);
            }
            if (header.charAt(0) != '$') {
                throw new IOException("INFO pubsub replied " + header);
            }
            byte[] body = in.readNBytes(Integer.parseInt(header.substring(1).trim()));
            String info = new String(body, StandardCharsets.UTF_8);
            for (String line : info.split("\r\n")) {
                if (line.startsWith("pubsub_messages_delivered:")) {
                    return Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
                }
            }
            throw new AssertionError("INFO pubsub of " + addr + " has no pubsub_messages_delivered:\n" + info);
        }
    }

    private static void watchdog(RedissonClient a, RedissonClient b, long holdMs) throws Exception {
        long lease = a.getConfig().getLockWatchdogTimeout();
        if (holdMs <= lease) {
            throw new IllegalArgumentException("hold " + holdMs + " ms is not past the watchdog's lease of " + lease + " ms");
        }
        RLock lock = a.getLock(WATCHDOG), onB = b.getLock(WATCHDOG);
        lock.lock();
        long start = System.nanoTime();
        // Read before the waiter parks, which on a loaded machine took
        // more than half a 3 s lease.
        long ttl = lock.remainTimeToLive(), renewals = 0, hidden = 0, every = lease / 3;
        Contract.check("lock() without a lease holds for the watchdog's lease", ttl > lease / 2 && ttl <= lease, ttl);
        // Holding past the lease is the scenario itself, not a wait for an
        // event: sample the lock's PTTL while it lasts, counting renewals.
        // A sample that comes late (a loaded machine) sees the renewals of
        // its gap as one: those it may hide are counted apart, so that
        // the check asks only for what the samples could see.
        long sampled = System.nanoTime();
        // A waiter on B for the whole holding: subscribed longer than
        // Redisson's 30 s pingConnectionInterval, so its subscribed connection
        // is also pinged, and it must still hear the unlock at the end.
        Waiter w = parkedWaiter(onB);
        Thread waiter = w.thread();
        AtomicLong got = w.got();
        AtomicReference<Throwable> failed = w.failed();
        while (ms(start) < holdMs) {
            Thread.sleep(Math.min(500, Math.max(1, holdMs - ms(start))));
            long now = lock.remainTimeToLive();
            long gap = (System.nanoTime() - sampled) / 1_000_000;
            sampled = System.nanoTime();
            if (now <= 0) {
                throw new AssertionError("after " + ms(start) + " ms the lock's PTTL is " + now + ": the watchdog did not renew it");
            }
            if (now > ttl) {
                renewals++;
            }
            hidden += Math.max(0, (gap + every - 1) / every - 1);
            ttl = now;
        }
        System.out.println("held " + ms(start) + " ms with a " + lease + " ms lease; " + renewals + " renewals seen, " + hidden + " more a late sample may hide");
        Contract.check("the watchdog renewed the lease every " + every + " ms", renewals + hidden >= holdMs / every - 1, renewals);
        Contract.expect("after " + holdMs + " ms the holder still holds it", true, lock.isHeldByCurrentThread());
        Contract.expect("... and the other client's tryLock() fails", false, onB.tryLock());
        Contract.check("... and its waiter in lock() is still waiting", got.get() == 0 && failed.get() == null,
                failed.get() != null ? failed.get() : "it has the lock");
        long unlocked = System.nanoTime();
        lock.unlock();
        waiter.join(2 * lease);
        if (failed.get() != null) {
            throw new AssertionError("the waiter on B failed", failed.get());
        }
        Contract.check("the waiter on B, subscribed for the whole holding, is woken by the unlock within " + WAKE_LIMIT_MS + " ms",
                got.get() != 0 && got.get() - unlocked < WAKE_LIMIT_MS * 1_000_000L,
                got.get() == 0 ? "it never got the lock" : (got.get() - unlocked) / 1_000_000 + " ms");
        Contract.expect("... and unlocks it", false, lock.isLocked());
    }

    private static void hold(RedissonClient a) throws Exception {
        RLock lock = a.getLock(HELD);
        lock.lock();
        System.out.println("held " + HELD + " " + a.getConfig().getLockWatchdogTimeout());
        System.out.flush();
        new CountDownLatch(1).await(); // until the test kills this JVM
    }

    /**
     * Redisson's other lock objects, each step after a marker: what they
     * send, for the proxy to refuse them by name, and checks that they work
     * on the server they run against.
     */
    private static void objects(RedissonClient a, RedissonClient b) throws Exception {
        RFencedLock fenced = a.getFencedLock(name("fenced"));
        marker(a, "fenced-lockAndGetToken");
        long first = fenced.lockAndGetToken();
        marker(a, "fenced-getToken");
        Contract.expect("RFencedLock getToken() is lockAndGetToken()'s token", first, fenced.getToken());
        marker(a, "fenced-unlock");
        fenced.unlock();
        marker(a, "fenced-lock");
        fenced.lock();
        marker(a, "fenced-unlock");
        fenced.unlock();
        marker(a, "fenced-tryLock");
        Contract.expect("RFencedLock tryLock() takes the free lock", true, fenced.tryLock());
        marker(a, "fenced-getToken");
        long second = fenced.getToken();
        Contract.check("RFencedLock tokens increase", second > first, first + " then " + second);
        marker(a, "fenced-unlock");
        fenced.unlock();
        marker(a, "fenced-tryLockAndGetToken");
        Long third = fenced.tryLockAndGetToken();
        Contract.check("RFencedLock tryLockAndGetToken() takes it with a greater token", third != null && third > second, third);
        marker(a, "fenced-unlock");
        fenced.unlock();

        RLock fair = a.getFairLock(name("fair"));
        marker(a, "fair-lock");
        fair.lock();
        marker(b, "fair-tryLock-held");
        Contract.expect("RFairLock tryLock(100 ms) from another client fails while held", false,
                b.getFairLock(name("fair")).tryLock(100, TimeUnit.MILLISECONDS));
        marker(a, "fair-unlock");
        fair.unlock();
        marker(a, "fair-tryLock");
        Contract.expect("RFairLock tryLock() takes the free lock", true, fair.tryLock());
        marker(a, "fair-unlock");
        fair.unlock();

        RReadWriteLock rw = a.getReadWriteLock(name("rw")), rwB = b.getReadWriteLock(name("rw"));
        marker(a, "read-lock");
        rw.readLock().lock();
        marker(b, "read-lock");
        Contract.expect("a second client's readLock().tryLock() shares the read lock", true, rwB.readLock().tryLock());
        marker(b, "write-tryLock-read-held");
        Contract.expect("writeLock().tryLock() fails while read locks are held", false, rwB.writeLock().tryLock());
        marker(b, "read-unlock");
        rwB.readLock().unlock();
        marker(a, "read-unlock");
        rw.readLock().unlock();
        marker(a, "write-lock");
        rw.writeLock().lock();
        marker(b, "read-tryLock-write-held");
        Contract.expect("readLock().tryLock() fails while the write lock is held", false, rwB.readLock().tryLock());
        marker(a, "write-unlock");
        rw.writeLock().unlock();
        marker(a, "end");
    }

    private static void fenced(RedissonClient a, RedissonClient b, int rounds, int threads) throws Exception {
        RedissonClient[] clients = {a, b};
        String name = name("fenced-tokens");
        long last = 0;
        for (int i = 0; i < rounds; i++) {
            RFencedLock lock = clients[i % 2].getFencedLock(name);
            Long token = i % 2 == 0 ? lock.lockAndGetToken() : lock.tryLockAndGetToken(5, 30, TimeUnit.SECONDS);
            Contract.check("holding " + i + " has a token above the last holder's " + last, token != null && token > last, token);
            Long seen = clients[(i + 1) % 2].getFencedLock(name).getToken();
            Contract.check("getToken() through the other client is the holder's " + token, token.equals(seen), seen);
            // A re-entry's token: the lock's own through lockproxy, the
            // counter's next on one Redis (Redisson counts every entry).
            Long again = lock.lockAndGetToken();
            Contract.check("a re-entry answers a token not below its lock's " + token, again != null && again >= token, again);
            lock.unlock();
            lock.unlock();
            last = again;
        }
        List<Long> order = Collections.synchronizedList(new ArrayList<>());
        AtomicReference<Throwable> failed = new AtomicReference<>();
        List<Thread> workers = new ArrayList<>();
        for (RedissonClient c : clients) {
            RFencedLock lock = c.getFencedLock(name);
            for (int i = 0; i < threads; i++) {
                workers.add(new Thread(() -> {
                    try {
                        for (int n = 0; n < rounds; n++) {
                            Long token = lock.lockAndGetToken();
                            try {
                                order.add(token);
                            } finally {
                                lock.unlock();
                            }
                        }
                    } catch (Throwable e) {
                        failed.compareAndSet(null, e);
                    }
                }));
            }
        }
        Contract.startAndJoin(workers, failed, "a contender");
        Contract.check("every contended holding got a token", order.size() == 2 * threads * rounds, order.size());
        for (int i = 0; i < order.size(); i++) {
            long prev = i == 0 ? last : order.get(i - 1);
            Contract.check("the tokens in the order of the holdings strictly increase (holding " + i + ")", order.get(i) > prev, order);
        }
        System.out.println("ok " + (rounds + order.size()) + " holdings through two proxies, tokens from " + order.get(0) + " to " + order.get(order.size() - 1) + ", strictly increasing");
    }

    private static void refused(RedissonClient a) {
        String[][] objects = {{"RFencedLock", "fenced"}, {"RFairLock", "fair"}};
        for (String[] o : objects) {
            RLock lock = o[1].equals("fenced") ? a.getFencedLock(name(o[1])) : a.getFairLock(name(o[1]));
            Throwable e = Contract.expectThrows(o[0] + " " + o[1] + " lock() is refused", lock::lock);
            Contract.check("... naming " + o[0], String.valueOf(e.getMessage()).contains(o[0]), e);
        }
    }

    /** Sends EXISTS marker:label, which a MONITOR shows between the steps. */
    private static void marker(RedissonClient c, String label) {
        c.getBucket("marker:" + label).isExists();
    }

    static String name(String what) {
        return "compat:redisson:" + VERSION + ":" + what;
    }

    private static long ms(long startNanos) {
        return (System.nanoTime() - startNanos) / 1_000_000;
    }
}
