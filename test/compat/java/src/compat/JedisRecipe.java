package compat;

import static compat.Contract.CONTENDED;
import static compat.Contract.CONTEND_TTL_MS;
import static compat.Contract.SCENARIO;
import static compat.Contract.check;
import static compat.Contract.expect;
import static compat.Contract.expectThrows;

import java.util.List;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.params.SetParams;

/**
 * Jedis with the redis.io lock recipe: SET key token NX PX ttl to take, the
 * compare-and-delete script by EVAL to release, and the compare-and-pexpire
 * script by EVALSHA after SCRIPT LOAD to extend. One source for every Jedis
 * version the modules jedis-5, jedis-7 and jedis-8 build it against.
 */
public final class JedisRecipe implements Contract.Program {
    public static void main(String[] args) {
        Contract.main(args, new JedisRecipe());
    }

    private static Jedis connect(String addr) {
        var config = DefaultJedisClientConfig.builder().socketTimeoutMillis(10_000).build();
        return new Jedis(new HostAndPort(Contract.host(addr), Contract.port(addr)), config);
    }

    private static Object release(Jedis jedis, String key, String token) {
        return jedis.eval(Contract.RELEASE, List.of(key), List.of(token));
    }

    @Override
    public void contend(String addr, Contract.HoldersLog log, int rounds, String worker) throws Exception {
        try (Jedis jedis = connect(addr)) {
            Contract.contendRounds(log, rounds, me -> "OK".equals(jedis.set(CONTENDED, me, SetParams.setParams().nx().px(CONTEND_TTL_MS))),
                    me -> release(jedis, CONTENDED, me));
        }
    }

    @Override
    public void scenario(String addr) {
        try (Jedis jedis = connect(addr)) {
            String k = SCENARIO;
            jedis.del(k);
            String mine = Contract.token();
            String other = Contract.token();
            expect("acquire: SET NX PX replies OK", "OK", jedis.set(k, mine, SetParams.setParams().nx().px(10_000)));
            String extend = jedis.scriptLoad(Contract.EXTEND);
            expect("SCRIPT LOAD of the extend script gives its SHA1", 40, extend.length());
            expect("extend by the owner (EVALSHA) replies 1", 1L, jedis.evalsha(extend, List.of(k), List.of(mine, "30000")));
            long pttl = jedis.pttl(k);
            check("PTTL after the extend is above the first TTL", pttl > 10_000 && pttl <= 30_000, pttl);
            expect("a second owner cannot take it (nil)", null, jedis.set(k, other, SetParams.setParams().nx().px(10_000)));
            expect("release with another token is refused (0)", 0L, release(jedis, k, other));
            expect("extend with another token is refused (0)", 0L, jedis.evalsha(extend, List.of(k), List.of(other, "30000")));
            expect("the owner still holds it", mine, jedis.get(k));
            expect("release by the owner replies 1", 1L, release(jedis, k, mine));
            expect("released: GET is nil", null, jedis.get(k));
            expect("a second release replies 0", 0L, release(jedis, k, mine));
            expect("free again: another owner takes it", "OK", jedis.set(k, other, SetParams.setParams().nx().px(10_000)));
            expect("and releases it", 1L, release(jedis, k, other));
            Throwable e = expectThrows("EVALSHA of a script never loaded fails",
                    () -> jedis.evalsha("0000000000000000000000000000000000000000", List.of(k), List.of(mine)));
            check("with NOSCRIPT, so that Jedis callers fall back to EVAL", e.getMessage().startsWith("NOSCRIPT"), e);
        }
    }
}
