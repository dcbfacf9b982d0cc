package compat;

import static compat.Contract.CONTENDED;
import static compat.Contract.CONTEND_TTL_MS;
import static compat.Contract.SCENARIO;
import static compat.Contract.check;
import static compat.Contract.expect;
import static compat.Contract.expectThrows;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.SetArgs;
import io.lettuce.core.StatefulRedisConnectionImpl;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.protocol.ProtocolVersion;
import java.time.Duration;

/**
 * Lettuce with the redis.io lock recipe: SET key token NX PX ttl to take, the
 * compare-and-delete script by EVAL to release, and the compare-and-pexpire
 * script by EVALSHA after SCRIPT LOAD to extend.
 *
 * <p>The system property compat.resp chooses the protocol: 3 (Lettuce's
 * default, HELLO 3 first) or 2. Lettuce falls back to RESP2 by itself when
 * HELLO fails, so the program checks which protocol the connection ended up
 * speaking: a silent fallback would make the RESP3 row a RESP2 one.
 */
public final class LettuceRecipe implements Contract.Program {
    private final ProtocolVersion protocol;

    private LettuceRecipe(ProtocolVersion protocol) {
        this.protocol = protocol;
    }

    public static void main(String[] args) {
        String resp = System.getProperty("compat.resp", "3");
        ProtocolVersion protocol = switch (resp) {
            case "2" -> ProtocolVersion.RESP2;
            case "3" -> ProtocolVersion.RESP3;
            default -> throw new IllegalArgumentException("compat.resp is " + resp + ", expected 2 or 3");
        };
        Contract.main(args, new LettuceRecipe(protocol));
    }

    private StatefulRedisConnection<String, String> connect(String addr) {
        RedisURI uri = RedisURI.Builder.redis(Contract.host(addr), Contract.port(addr))
                .withTimeout(Duration.ofSeconds(10))
                .build();
        RedisClient client = RedisClient.create(uri);
        // No reconnecting: a lost proxy connection fails the program instead
        // of hanging it.
        client.setOptions(ClientOptions.builder().protocolVersion(protocol).autoReconnect(false).build());
        return client.connect();
    }

    private static ProtocolVersion spoken(StatefulRedisConnection<String, String> conn) {
        return ((StatefulRedisConnectionImpl<String, String>) conn).getConnectionState().getNegotiatedProtocolVersion();
    }

    private static Object release(RedisCommands<String, String> redis, String key, String token) {
        return redis.eval(Contract.RELEASE, ScriptOutputType.INTEGER, new String[] {key}, token);
    }

    @Override
    public void contend(String addr, Contract.HoldersLog log, int rounds, String worker) throws Exception {
        try (var conn = connect(addr)) {
            if (spoken(conn) != protocol) {
                throw new IllegalStateException("the connection speaks " + spoken(conn) + ", not " + protocol);
            }
            RedisCommands<String, String> redis = conn.sync();
            Contract.contendRounds(log, rounds, me -> "OK".equals(redis.set(CONTENDED, me, SetArgs.Builder.nx().px(CONTEND_TTL_MS))),
                    me -> release(redis, CONTENDED, me));
        }
    }

    @Override
    public void scenario(String addr) {
        try (var conn = connect(addr)) {
            expect("the connection speaks " + protocol, protocol, spoken(conn));
            RedisCommands<String, String> redis = conn.sync();
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
            expect("extend with another token is refused (0)", 0L,
                    redis.evalsha(extend, ScriptOutputType.INTEGER, keys, other, "30000"));
            expect("the owner still holds it", mine, redis.get(k));
            expect("release by the owner replies 1", 1L, release(redis, k, mine));
            expect("released: GET is nil", null, redis.get(k));
            expect("a second release replies 0", 0L, release(redis, k, mine));
            expect("free again: another owner takes it", "OK", redis.set(k, other, SetArgs.Builder.nx().px(10_000)));
            expect("and releases it", 1L, release(redis, k, other));
            Throwable e = expectThrows("EVALSHA of a script never loaded fails",
                    () -> redis.evalsha("0000000000000000000000000000000000000000", ScriptOutputType.INTEGER, keys, mine));
            check("with NOSCRIPT", e.getMessage().startsWith("NOSCRIPT"), e);
        }
    }
}
