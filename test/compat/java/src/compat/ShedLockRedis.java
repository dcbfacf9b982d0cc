package compat;

import static compat.Contract.check;
import static compat.Contract.expect;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.provider.redis.spring.RedisLockProvider;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.data.redis.core.StringRedisTemplate;

/**
 * ShedLock's Redis provider for Spring Data Redis (over Lettuce) in its safe
 * mode, safeUpdate(true): it takes with SET NX PX, and releases and extends
 * with the compare-and-delete and compare-and-pexpire scripts. (Its default
 * mode extends with an unconditional SET XX PX, which lockproxy refuses.)
 * ShedLock's keys are PREFIX:ENVIRONMENT:NAME, so the contract's locks are
 * compat:shedlock:contended and compat:shedlock:scenario.
 *
 * <p>The system property compat.shedlock.safeUpdate=false runs the default
 * mode instead, so that a test can show lockproxy refusing it.
 *
 * <p>{@code atmostfor ADDR DURATION} (ISO-8601, PT10M) takes and releases
 * one lock with that lockAtMostFor, as a long scheduled job's is.
 */
public final class ShedLockRedis implements Contract.Program {
    private final boolean safeUpdate;

    private ShedLockRedis(boolean safeUpdate) {
        this.safeUpdate = safeUpdate;
    }

    public static void main(String[] args) {
        var program = new ShedLockRedis(Boolean.parseBoolean(System.getProperty("compat.shedlock.safeUpdate", "true")));
        if (args.length == 3 && args[0].equals("atmostfor")) {
            Contract.run(() -> program.atMostFor(args[1], Duration.parse(args[2])));
        }
        Contract.main(args, program);
    }

    /** Takes and releases a lock held at most atMost, checking its TTL. */
    void atMostFor(String addr, Duration atMost) {
        var factory = connect(addr);
        var redis = new StringRedisTemplate(factory);
        String key = "compat:shedlock:atmostfor";
        redis.delete(key);
        Optional<SimpleLock> lock = provider(factory).lock(config("atmostfor", atMost, Duration.ZERO));
        check("lock with lockAtMostFor " + atMost + " takes the free lock", lock.isPresent(), lock);
        long pttl = redis.getExpire(key, TimeUnit.MILLISECONDS);
        check("its PTTL is about lockAtMostFor", pttl > atMost.toMillis() - 10_000 && pttl <= atMost.toMillis(), pttl);
        Optional<SimpleLock> theirs = provider(factory).lock(config("atmostfor", atMost, Duration.ZERO));
        check("a second owner cannot take it", theirs.isEmpty(), theirs);
        lock.get().unlock();
        check("unlock by the owner frees the key", !redis.hasKey(key), true);
    }

    private static LettuceConnectionFactory connect(String addr) {
        var factory = new LettuceConnectionFactory(new RedisStandaloneConfiguration(Contract.host(addr), Contract.port(addr)));
        factory.afterPropertiesSet();
        return factory;
    }

    private RedisLockProvider provider(LettuceConnectionFactory factory) {
        return new RedisLockProvider.Builder(factory).keyPrefix("compat").environment("shedlock").safeUpdate(safeUpdate).build();
    }

    private static LockConfiguration config(String name, Duration atMost, Duration atLeast) {
        return new LockConfiguration(ClockProvider.now(), name, atMost, atLeast);
    }

    @Override
    public void contend(String addr, Contract.HoldersLog log, int rounds, String worker) throws Exception {
        var provider = provider(connect(addr));
        for (int n = 0; n < rounds; n++) {
            Optional<SimpleLock> lock;
            // ShedLock never waits for a lock (a job that finds it held is
            // skipped), so waiting is the caller's loop. Each try is a run
            // of the job, with a configuration of its own: lockAtMostFor
            // counts from the configuration's creation, and one made before
            // the loop would give a slow run's later tries a PX of 0 or less.
            while ((lock = provider.lock(config("contended", Duration.ofMillis(Contract.CONTEND_TTL_MS), Duration.ZERO))).isEmpty()) {
                Contract.backOff();
            }
            log.enter(n);
            Contract.hold();
            log.exit(n);
            lock.get().unlock();
        }
    }

    @Override
    public void scenario(String addr) throws Exception {
        var factory = connect(addr);
        var redis = new StringRedisTemplate(factory);
        String key = "compat:shedlock:scenario";
        redis.delete(key);
        var mine = provider(factory);
        var other = provider(factory);

        Optional<SimpleLock> lock = mine.lock(config("scenario", Duration.ofSeconds(10), Duration.ZERO));
        check("lock takes the free lock", lock.isPresent(), lock);
        String value = redis.opsForValue().get(key);
        check("its key holds the lock's value", value != null, value);
        lock = lock.get().extend(Duration.ofSeconds(30), Duration.ZERO);
        check("extend by the owner succeeds", lock.isPresent(), lock);
        long pttl = redis.getExpire(key, TimeUnit.MILLISECONDS);
        check("PTTL after the extend is above the first lockAtMostFor", pttl > 10_000 && pttl <= 30_000, pttl);
        Optional<SimpleLock> theirs = other.lock(config("scenario", Duration.ofSeconds(10), Duration.ZERO));
        check("a second owner cannot take it", theirs.isEmpty(), theirs);
        lock.get().unlock();
        check("unlock by the owner frees the key", !redis.hasKey(key), true);
        theirs = other.lock(config("scenario", Duration.ofSeconds(10), Duration.ZERO));
        check("free again: a second owner takes it", theirs.isPresent(), theirs);
        theirs.get().unlock();

        // Another owner's release and extension, as ShedLock can make them
        // happen: a holder outlives lockAtMostFor, someone else takes the
        // lock, and the late holder extends or unlocks it.
        Optional<SimpleLock> late = mine.lock(config("scenario", Duration.ofMillis(300), Duration.ZERO));
        check("a lock for at most 300 ms is taken", late.isPresent(), late);
        Thread.sleep(600);
        theirs = other.lock(config("scenario", Duration.ofSeconds(10), Duration.ZERO));
        check("once expired, a second owner takes it", theirs.isPresent(), theirs);
        String holder = redis.opsForValue().get(key);
        Optional<SimpleLock> extended = late.get().extend(Duration.ofSeconds(30), Duration.ZERO);
        check("the late holder's extend is refused", extended.isEmpty(), extended);
        expect("the new holder still holds it", holder, redis.opsForValue().get(key));
        theirs.get().unlock();
        late = mine.lock(config("scenario", Duration.ofMillis(300), Duration.ZERO));
        check("again, a lock for at most 300 ms is taken", late.isPresent(), late);
        Thread.sleep(600);
        theirs = other.lock(config("scenario", Duration.ofSeconds(10), Duration.ZERO));
        check("once expired, a second owner takes it", theirs.isPresent(), theirs);
        holder = redis.opsForValue().get(key);
        late.get().unlock();
        expect("the late holder's unlock leaves the new holder's lock", holder, redis.opsForValue().get(key));

        // lockAtLeastFor: unlocking keeps the lock until then, by the owner's
        // compare-and-pexpire.
        theirs.get().unlock();
        check("the new holder's unlock frees it", !redis.hasKey(key), true);
        lock = mine.lock(config("scenario", Duration.ofSeconds(10), Duration.ofSeconds(5)));
        check("a lock held at least 5 s is taken", lock.isPresent(), lock);
        lock.get().unlock();
        pttl = redis.getExpire(key, TimeUnit.MILLISECONDS);
        check("its unlock keeps it until lockAtLeastFor", pttl > 0 && pttl <= 5_000, pttl);
        redis.delete(key);
    }
}
