package compat;

import static compat.Contract.CONTENDED;
import static compat.Contract.CONTEND_TTL_MS;
import static compat.Contract.SCENARIO;
import static compat.Contract.check;
import static compat.Contract.expect;
import static compat.Contract.expectThrows;

import java.util.List;
import java.util.Set;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.params.SetParams;

/**
 * JedisCluster, unchanged, with the redis.io lock recipe of JedisRecipe,
 * through lockproxy in cluster mode: ADDR is one instance (the seed), from
 * which the client learns the others (CLUSTER SLOTS), and each command goes
 * to the instance that its key's slot maps to.
 */
public final class JedisClusterRecipe implements Contract.Program {
    public static void main(String[] args) {
        Contract.main(args, new JedisClusterRecipe());
    }

    private static JedisCluster connect(String addr) {
        var config = DefaultJedisClientConfig.builder().socketTimeoutMillis(10_000).build();
        // Five attempts: when an instance dies, JedisCluster learns the new
        // slot map by retrying through another.
        return new JedisCluster(Set.of(new HostAndPort(Contract.host(addr), Contract.port(addr))), config, 5);
    }

    private static Object release(JedisCluster jedis, String key, String token) {
        return jedis.eval(Contract.RELEASE, List.of(key), List.of(token));
    }

    @Override
    public void contend(String addr, Contract.HoldersLog log, int rounds, String worker) throws Exception {
        try (JedisCluster jedis = connect(addr)) {
            Contract.contendRounds(log, rounds, me -> "OK".equals(jedis.set(CONTENDED, me, SetParams.setParams().nx().px(CONTEND_TTL_MS))),
                    me -> release(jedis, CONTENDED, me));
        }
    }

    @Override
    public void scenario(String addr) {
        try (JedisCluster jedis = connect(addr)) {
            expect("the client sees every instance as a node", Contract.clusterNodes(),
                    jedis.getClusterNodes().keySet().stream().sorted().toList());
            String k = SCENARIO;
            jedis.del(k);
            String mine = Contract.token();
            String other = Contract.token();
            expect("acquire: SET NX PX replies OK", "OK", jedis.set(k, mine, SetParams.setParams().nx().px(10_000)));
            String extend = jedis.scriptLoad(Contract.EXTEND, k);
            expect("SCRIPT LOAD of the extend script gives its SHA1", 40, extend.length());
            expect("extend by the owner (EVALSHA) replies 1", 1L, jedis.evalsha(extend, List.of(k), List.of(mine, "30000")));
            long pttl = jedis.pttl(k);
            check("PTTL after the extend is above the first TTL", pttl > 10_000 && pttl <= 30_000, pttl);
            expect("a second owner cannot take it (nil)", null, jedis.set(k, other, SetParams.setParams().nx().px(10_000)));
            expect("release with another token is refused (0)", 0L, release(jedis, k, other));
            expect("the owner still holds it", mine, jedis.get(k));
            expect("release by the owner replies 1", 1L, release(jedis, k, mine));
            expect("released: GET is nil", null, jedis.get(k));
            expect("free again: another owner takes it", "OK", jedis.set(k, other, SetParams.setParams().nx().px(10_000)));
            expect("and releases it", 1L, release(jedis, k, other));
            expect("keys sharing a hash tag go to one node whole", 0L, jedis.del("{compat}a", "{compat}b"));
            expectThrows("keys in different slots are refused by the client itself",
                    () -> jedis.del("compat:a", "compat:b"));
        }
    }
}
