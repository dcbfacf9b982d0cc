package compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import org.springframework.dao.CannotAcquireLockException;
import org.springframework.integration.redis.util.RedisLockRegistry;

/**
 * Spring Integration's RedisLockRegistry in PUB_SUB_LOCK mode across two
 * lockproxy instances on the same backends, run with
 * -Dcompat.spring.lockType=PUB_SUB_LOCK:
 *
 * <pre>
 *   java compat.SpringPubSub contend ADDR_A ADDR_B LOGFILE ROUNDS THREADS
 *   java compat.SpringPubSub wake ADDR_A ADDR_B ROUNDS EXPIRE_AFTER_MS
 * </pre>
 *
 * contend: one registry on each proxy, THREADS threads of each locking the
 * same key ROUNDS times, each holding logged to LOGFILE (Contract.HoldersLog).
 * wake: a registry on A holds the lock while one on B waits in lock(); A
 * unlocks, and B must have it well inside expireAfter, which is how long B
 * would sleep without the unlock message. Prints each round's latency.
 */
public final class SpringPubSub {
    public static void main(String[] args) {
        Contract.run(() -> {
            if (args.length == 6 && args[0].equals("contend")) {
                contend(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            } else if (args.length == 5 && args[0].equals("wake")) {
                wake(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]));
            } else {
                System.err.println("usage: contend ADDR_A ADDR_B LOGFILE ROUNDS THREADS | wake ADDR_A ADDR_B ROUNDS EXPIRE_AFTER_MS");
                System.exit(2);
            }
        });
    }

    private static void contend(String a, String b, String logPath, int rounds, int threads) throws Exception {
        List<Thread> workers = new ArrayList<>();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        String[] addrs = {a, b};
        for (int r = 0; r < addrs.length; r++) {
            RedisLockRegistry registry = SpringLockRegistry.registry(SpringLockRegistry.connect(addrs[r]),
                    Duration.ofMillis(Contract.CONTEND_TTL_MS));
            for (int i = 0; i < threads; i++) {
                String worker = (r == 0 ? "A" : "B") + i;
                workers.add(new Thread(() -> {
                    try (var log = new Contract.HoldersLog(logPath, worker)) {
                        SpringLockRegistry.holdRounds(registry.obtain("contended"), log, rounds, SpringPubSub::lockThroughSplits);
                    } catch (Throwable e) {
                        failed.compareAndSet(null, e);
                    }
                }));
            }
        }
        Contract.startAndJoin(workers, failed, "a worker");
        System.out.println("ok " + workers.size() + " threads on two proxies took the lock " + rounds + " times each ("
                + splits.get() + " tries split the backends and were told NOQUORUM)");
    }

    private static final AtomicLong splits = new AtomicLong();

    /**
     * lock(), again after a NOQUORUM: through two proxies with a backend
     * down, two contenders can split the live backends, and both are told
     * NOQUORUM (docs/guarantees.md), which Spring throws as
     * CannotAcquireLockException; an application tries again.
     */
    private static void lockThroughSplits(Lock lock) throws Exception {
        while (true) {
            try {
                lock.lock();
                return;
            } catch (CannotAcquireLockException e) {
                Throwable root = e;
                while (root.getCause() != null) {
                    root = root.getCause();
                }
                if (root.getMessage() == null || !root.getMessage().startsWith("NOQUORUM")) {
                    throw e;
                }
                splits.incrementAndGet();
                Contract.backOff();
            }
        }
    }

    private static void wake(String a, String b, int rounds, long expireAfterMs) throws Exception {
        Duration expireAfter = Duration.ofMillis(expireAfterMs);
        Lock holder = SpringLockRegistry.registry(SpringLockRegistry.connect(a), expireAfter).obtain("wake");
        Lock waiter = SpringLockRegistry.registry(SpringLockRegistry.connect(b), expireAfter).obtain("wake");
        List<Long> latencies = new ArrayList<>();
        for (int n = 0; n < rounds; n++) {
            holder.lock();
            AtomicLong asked = new AtomicLong(), got = new AtomicLong();
            Thread t = new Thread(() -> {
                asked.set(System.nanoTime());
                waiter.lock();
                got.set(System.nanoTime());
                waiter.unlock(); // a Spring lock is its thread's
            });
            t.start();
            // Long enough for the waiter to fail its tries and park on its
            // unlock subscription; had it not parked yet, it would take the
            // lock on its own next try, and the check below still holds.
            Thread.sleep(300);
            long unlocked = System.nanoTime();
            holder.unlock();
            t.join(expireAfterMs * 2);
            if (got.get() == 0) {
                throw new AssertionError("round " + n + ": the waiter on B never got the lock");
            }
            long blockedMs = (unlocked - asked.get()) / 1_000_000;
            long latencyUs = (got.get() - unlocked) / 1_000;
            if (got.get() < unlocked) {
                throw new AssertionError("round " + n + ": the waiter got the lock before the holder released it");
            }
            latencies.add(latencyUs);
            System.out.println("round " + n + ": waiter blocked " + blockedMs + " ms before the unlock, woken " + latencyUs + " us after it");
        }
        Collections.sort(latencies);
        long p50 = latencies.get(latencies.size() / 2), max = latencies.get(latencies.size() - 1);
        System.out.println("wake latency us: p50 " + p50 + " max " + max + " (expireAfter " + expireAfterMs + " ms)");
        Contract.check("every waiter on B was woken by A's unlock well inside expireAfter (max under a tenth)",
                max < expireAfterMs * 100, max + " us");
    }
}
