package compat;

import static compat.Contract.CONTEND_TTL_MS;
import static compat.Contract.check;
import static compat.Contract.expect;
import static compat.Contract.expectThrows;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.data.redis.core.StringRedisTemplate;
import org.springframework.integration.redis.util.RedisLockRegistry;

/**
 * Spring Integration's RedisLockRegistry in its default SPIN_LOCK mode, over
 * Spring Data Redis and Lettuce as a Spring Boot application would wire it.
 * Each registry is one client (its clientId is the value it stores), so two
 * registries in one process are two contenders. The registry key "compat"
 * makes the lock "scenario" the Redis key compat:scenario.
 *
 * <p>Built against two lines, whose unlock and renewal differ on the wire: 6.5
 * runs Lua scripts; 7.1 sends Redis 8.4's DELEX IFEQ and SET IFEQ PX, and
 * falls back to scripts for good when a server answers them with a syntax
 * error (as Redis before 8.4 does). Both obtain by a script.
 *
 * <p>-Dcompat.spring.lockType=PUB_SUB_LOCK runs the registry in its pub/sub
 * mode: a waiter PSUBSCRIBEs "compat-channel:*" and the unlock script
 * PUBLISHes the lock key there (SPIN_LOCK, polling, is the default).
 */
public final class SpringLockRegistry implements Contract.Program {
    private static final String REGISTRY_KEY = "compat";

    public static void main(String[] args) {
        Contract.main(args, new SpringLockRegistry());
    }

    static LettuceConnectionFactory connect(String addr) {
        var factory = new LettuceConnectionFactory(new RedisStandaloneConfiguration(Contract.host(addr), Contract.port(addr)));
        factory.afterPropertiesSet();
        return factory;
    }

    static RedisLockRegistry registry(LettuceConnectionFactory factory, Duration expireAfter) {
        // The long constructor, which both the 6.x and 7.x lines have.
        var registry = new RedisLockRegistry(factory, REGISTRY_KEY, expireAfter.toMillis());
        registry.setRedisLockType(RedisLockRegistry.RedisLockType.valueOf(System.getProperty("compat.spring.lockType", "SPIN_LOCK")));
        // Its default of 100 ms between tries would make the contention run
        // last minutes; a setting, not a change of the library.
        registry.setIdleBetweenTries(Duration.ofMillis(2));
        return registry;
    }

    @Override
    public void contend(String addr, Contract.HoldersLog log, int rounds, String worker) throws Exception {
        holdRounds(registry(connect(addr), Duration.ofMillis(CONTEND_TTL_MS)).obtain("contended"), log, rounds, Lock::lock);
    }

    /** How a contender takes a lock. */
    interface Taker {
        void take(Lock lock) throws Exception;
    }

    /** Takes lock rounds times with take, each holding logged. */
    static void holdRounds(Lock lock, Contract.HoldersLog log, int rounds, Taker take) throws Exception {
        for (int n = 0; n < rounds; n++) {
            take.take(lock);
            log.enter(n);
            Contract.hold();
            log.exit(n);
            lock.unlock();
        }
    }

    @Override
    public void scenario(String addr) throws Exception {
        var factory = connect(addr);
        var redis = new StringRedisTemplate(factory);
        String key = REGISTRY_KEY + ":scenario";
        redis.delete(key);
        var mine = registry(factory, Duration.ofSeconds(10));
        var other = registry(factory, Duration.ofSeconds(10));

        Lock lock = mine.obtain("scenario");
        check("obtain and tryLock take the free lock", lock.tryLock(), false);
        long pttl = redis.getExpire(key, TimeUnit.MILLISECONDS);
        check("the key holds it with the registry's expireAfter", pttl > 0 && pttl <= 10_000, pttl);
        // renewLock sets the TTL back to expireAfter: let some of it pass first.
        Thread.sleep(800);
        long before = redis.getExpire(key, TimeUnit.MILLISECONDS);
        mine.renewLock("scenario");
        pttl = redis.getExpire(key, TimeUnit.MILLISECONDS);
        check("renewLock sets its TTL back to expireAfter", pttl > before + 300 && pttl <= 10_000,
                "PTTL " + before + " before, " + pttl + " after");
        Lock theirs = other.obtain("scenario");
        check("another registry cannot take it (tryLock false)", !theirs.tryLock(50, TimeUnit.MILLISECONDS), true);
        expectThrows("another registry cannot release it", theirs::unlock);
        check("the owner still holds it", redis.hasKey(key), false);
        lock.unlock();
        check("unlock by the owner frees the key", !redis.hasKey(key), true);
        check("free again: the other registry takes it", theirs.tryLock(), false);
        theirs.unlock();
        check("and releases it", !redis.hasKey(key), true);

        // Expiry: a holder that outlives expireAfter loses the lock to the
        // next client, and its late unlock must not free the new holder's.
        var brief = registry(factory, Duration.ofMillis(300));
        Lock expiring = brief.obtain("scenario");
        check("a lock with a 300 ms expireAfter is taken", expiring.tryLock(), false);
        Thread.sleep(600);
        check("once expired, another registry takes it", theirs.tryLock(), false);
        String holder = redis.opsForValue().get(key);
        expectThrows("the expired holder cannot renew it", () -> brief.renewLock("scenario"));
        expect("and its renewal left the new holder's lock alone", holder, redis.opsForValue().get(key));
        expectThrows("the expired holder's unlock fails", expiring::unlock);
        expect("and leaves the new holder's lock in place", holder, redis.opsForValue().get(key));
        theirs.unlock();
        check("the new holder releases it", !redis.hasKey(key), true);
    }
}
