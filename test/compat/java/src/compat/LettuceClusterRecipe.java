package compat;

import static compat.Contract.CONTENDED;
import static compat.Contract.CONTEND_TTL_MS;
import static compat.Contract.SCENARIO;
import static compat.Contract.check;
import static compat.Contract.expect;

import io.lettuce.core.RedisURI;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.SetArgs;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.api.sync.RedisAdvancedClusterCommands;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.protocol.ProtocolVersion;
import java.time.Duration;

/**
 * Lettuce's RedisClusterClient, unchanged, with the redis.io lock recipe of
 * LettuceRecipe, through lockproxy in cluster mode: ADDR is one instance (the
 * seed), from which the client learns the others (CLUSTER NODES), and each
 * command goes to the instance that its key's slot maps to. The system
 * property compat.resp chooses the protocol, 3 (Lettuce's default) or 2.
 */
public final class LettuceClusterRecipe implements Contract.Program {
    private final ProtocolVersion protocol;

    private LettuceClusterRecipe(ProtocolVersion protocol) {
        this.protocol = protocol;
    }

    public static void main(String[] args) {
        String resp = System.getProperty("compat.resp", "3");
        ProtocolVersion protocol = switch (resp) {
            case "2" -> ProtocolVersion.RESP2;
            case "3" -> ProtocolVersion.RESP3;
            default -> throw new IllegalArgumentException("compat.resp is " + resp + ", expected 2 or 3");
        };
        Contract.main(args, new LettuceClusterRecipe(protocol));
    }

    private StatefulRedisClusterConnection<String, String> connect(String addr) {
        RedisURI uri = RedisURI.Builder.redis(Contract.host(addr), Contract.port(addr))
                .withTimeout(Duration.ofSeconds(10))
                .build();
        RedisClusterClient client = RedisClusterClient.create(uri);
        client.setOptions(ClusterClientOptions.builder().protocolVersion(protocol).build());
        return client.connect();
    }

    private static Object release(RedisAdvancedClusterCommands<String, String> redis, String key, String token) {
        return redis.eval(Contract.RELEASE, ScriptOutputType.INTEGER, new String[] {key}, token);
    }

    @Override
    public void contend(String addr, Contract.HoldersLog log, int rounds, String worker) throws Exception {
        try (var conn = connect(addr)) {
            RedisAdvancedClusterCommands<String, String> redis = conn.sync();
            Contract.contendRounds(log, rounds, me -> "OK".equals(redis.set(CONTENDED, me, SetArgs.Builder.nx().px(CONTEND_TTL_MS))),
                    me -> release(redis, CONTENDED, me));
        }
    }

    @Override
    public void scenario(String addr) {
        try (var conn = connect(addr)) {
            expect("the client sees every instance as a node", Contract.clusterNodes(),
                    conn.getPartitions().stream().map(RedisClusterNode::getUri)
                            .map(u -> u.getHost() + ":" + u.getPort()).sorted().toList());
            RedisAdvancedClusterCommands<String, String> redis = conn.sync();
            String k = SCENARIO;
            redis.del(k);
            String mine = Contract.token();
            String other = Contract.token();
            expect("acquire: SET NX PX replies OK", "OK", redis.set(k, mine, SetArgs.Builder.nx().px(10_000)));
            String extend = redis.scriptLoad(Contract.EXTEND);
            expect("SCRIPT LOAD of the extend script gives its SHA1", 40, extend.length());
            String[] keys = {k};
            expect("extend by the owner (EVALSHA) replies 1", 1L,
                    redis.evalsha(extend, ScriptOutputType.INTEGER, keys, mine, "30000"));
            long pttl = redis.pttl(k);
            check("PTTL after the extend is above the first TTL", pttl > 10_000 && pttl <= 30_000, pttl);
            expect("a second owner cannot take it (nil)", null, redis.set(k, other, SetArgs.Builder.nx().px(10_000)));
            expect("release with another token is refused (0)", 0L, release(redis, k, other));
            expect("the owner still holds it", mine, redis.get(k));
            expect("release by the owner replies 1", 1L, release(redis, k, mine));
            expect("released: GET is nil", null, redis.get(k));
            expect("free again: another owner takes it", "OK", redis.set(k, other, SetArgs.Builder.nx().px(10_000)));
            expect("and releases it", 1L, release(redis, k, other));
            // Lettuce splits a DEL of keys in different slots by slot itself.
            expect("a DEL across slots, split by the client", 0L, redis.del("compat:a", "compat:b", "{compat}a"));
        }
    }
}
