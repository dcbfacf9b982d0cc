package proxy

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/lockproxy/lockproxy/proxy/internal/luaform"
	"github.com/lockproxy/lockproxy/quorum"
)

// realScripts are the lock scripts client libraries send, byte for byte:
// each file in testdata/scripts, its SHA1 (as research/scripts-index.tsv
// records it), the libraries that send it, and the kind lockproxy runs it
// as. An empty kind is a script lockproxy refuses, with the reason; the
// list of unsupported scripts in docs/compatibility.md is this table.
//
// Where the bytes come from: Go module zips (redsync, bsm/redislock), npm
// tarballs (redlock, @sesamecare-oss/redlock, redis-semaphore), Debian's
// python3-redis, and for the libraries that cannot run here the published
// source put through the host language's own string rules (Java
// concatenations and text blocks, PHP single quotes, Python triple quotes,
// Ruby heredocs). RedLock.net's line endings in the NuGet package are not
// known, so both forms are here. Not here, for want of the exact bytes:
// Spring Integration 5.5.x obtain (6d2bc6d1…, recognised by meaning if it
// only differs in layout) and unlock (c1ae6c89…, 20b5c372…: UNLINK or DEL
// and PUBLISH with no owner check, refused).
// The reason Redisson's RFairLock is refused, as the refusal gives it.
var redissonFairReason = redissonFairLock.why

var realScripts = []struct {
	file, sha, library, kind, reason string
}{
	{file: "redis-io-canonical-release.lua", sha: "194f3902b2dd08557818d09fc2e7682d91480e53", kind: "compare-and-delete",
		library: "redis.io distributed-locks page; ShedLock 6.7-7.9 safeUpdate unlock"},
	{file: "redis-io-canonical-release-noeol.lua", sha: "647c65a442733a1aa440f99908d249d13b4d6c4a", kind: "compare-and-delete",
		library: "Laravel Illuminate\\Cache RedisLock 8-13 release; redis.io page without the last newline"},
	{file: "redis-io-canonical-release-oneline.lua", sha: "b70c2384248f88e6b75b9f89241a180f856ad852", kind: "compare-and-delete",
		library: "redis.io release on one line"},
	{file: "bsm-redislock-0.9.4-release.lua", sha: "cf0e94b2e9ffc7e04395cf88f7583fc309985910", kind: "compare-and-delete",
		library: "bsm/redislock 0.9 release; node redlock 3.x release"},
	{file: "rueidislock-1.0.4x-extend.lua", sha: "8c2dd3ce05f3aace5fa1002a403139a7fbab3226", kind: "compare-and-pexpireat",
		library: "rueidislock 1.0.4x extend"},
	{file: "rueidislock-1.0.4x-delkey.lua", sha: "7726c7be95e2a0ed082ec1da1e26b562f5c8903f", kind: "compare-and-delete",
		library: "rueidislock 1.0.4x release"},
	{file: "rueidislock-1.0.79-extend.lua", sha: "852ba6ec6104340ced36643283c856d4698569e4", kind: "compare-and-pexpireat",
		library: "rueidislock 1.0.79 and valkeylock 1.0.79 extend"},
	{file: "rueidislock-1.0.79-delkey.lua", sha: "9eb62214c9af87ae5f9a9f12bb4520281c0d2ae1", kind: "compare-and-delete",
		library: "rueidislock 1.0.79 and valkeylock 1.0.79 release"},
	{file: "rueidislock-1.0.79-acqat.lua", sha: "3875d208d9e377969d2022550302cc83ad17b584", kind: "acquire-at",
		library: "rueidislock 1.0.79 and valkeylock 1.0.79 acquire"},
	{file: "rueidislock-1.0.79-acqms.lua", sha: "fa3d1aaa7e4145457755016a3d5daf72fa7a11bf", kind: "acquire",
		library: "rueidislock 1.0.79 and valkeylock 1.0.79 acquire with FallbackSETPX"},
	{file: "bsm-redislock-0.9.4-refresh.lua", sha: "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf", kind: "compare-and-pexpire",
		library: "bsm/redislock 0.9 refresh; node redlock 3.x extend"},
	{file: "bsm-redislock-0.9.4-obtain.lua", sha: "80a1b5f2cfccec3b7119ba7721d2127682b691a7", kind: "acquire-or-renew",
		library: "bsm/redislock 0.9 obtain"},
	{file: "bsm-redislock-0.9.4-pttl.lua", sha: "6484da7d58920897fdc22b7f9afd1a3d47524ea8", kind: "owner-pttl",
		library: "bsm/redislock 0.9 TTL"},
	{file: "bsm-redislock-0.10.0-obtain.lua", sha: "eb0c00d98f6f33b4262419a509002884540f30be", kind: "multi-acquire-or-renew",
		library: "bsm/redislock 0.10 obtain"},
	{file: "bsm-redislock-0.10.0-release.lua", sha: "9470c810040e272ee6c579d8d4331aaf6332a7b1", kind: "multi-release-all",
		library: "bsm/redislock 0.10 release"},
	{file: "bsm-redislock-0.10.0-refresh.lua", sha: "5a22d7e8431313862816d4416b5e46dd70fc340d", kind: "multi-pexpire-all",
		library: "bsm/redislock 0.10 refresh"},
	{file: "bsm-redislock-0.10.0-pttl.lua", sha: "66e1084c2d842a7e8c271925aae90219fac4e129", kind: "multi-owner-pttl",
		library: "bsm/redislock 0.10 TTL"},
	{file: "node-redlock-3.1.2-acquire.lua", sha: "862f31bf38e9b63ce28d6e9e5143551bb34ef981", kind: "acquire",
		library: "node redlock 3.x acquire"},
	{file: "node-redlock-4.0.0-acquire.lua", sha: "d01fb69e6ecc8bad3ca9bacba9f4f9e96862313f", kind: "multi-acquire",
		library: "node redlock 4.0.0 acquire"},
	{file: "node-redlock-4.0.0-4.1.0-release.lua", sha: "517e7ed95f00c0c4a209c6a7afcc6ab797d30b85", kind: "multi-release-count",
		library: "node redlock 4.0.0-4.1.0 release"},
	{file: "node-redlock-4.0.0-extend.lua", sha: "acaf90b4697bb48bb5f603e9e613a54df7536c70", kind: "multi-extend",
		library: "node redlock 4.0.0 extend"},
	{file: "node-redlock-4.1.0-extend.lua", sha: "1d48b4c6fea2cdadc46b3346de5c2eaf121c7bb3", kind: "multi-extend",
		library: "node redlock 4.1.0 extend"},
	{file: "node-redlock-4.2.0-acquire.lua", sha: "e5a322e2634ef59a516e8ea150cb085afafee684", kind: "multi-acquire",
		library: "node redlock 4.1.0-4.2.0 acquire"},
	{file: "node-redlock-4.2.0-release.lua", sha: "0f0f23b9048b36752b5be114f357ba083449f908", kind: "multi-release-count",
		library: "node redlock 4.2.0 release"},
	{file: "node-redlock-4.2.0-extend.lua", sha: "ce46f80993d5dac20dd066eb301a4e37994bdbed", kind: "multi-extend",
		library: "node redlock 4.2.0 extend"},
	{file: "node-redlock-5.0.0-beta.2-acquire.lua", sha: "96da70f7716f27d278a5218544df37fd8b0a5e4c", kind: "multi-acquire",
		library: "node redlock 5.0.0-beta acquire"},
	{file: "node-redlock-5.0.0-beta.2-release.lua", sha: "e4612211c9f8f51c257e26e056b0a654b3187242", kind: "multi-release-count",
		library: "node redlock 5.0.0-beta release"},
	{file: "node-redlock-5.0.0-beta.2-extend.lua", sha: "aed6f382e410db8ba7926d4e5e9aab410bf2a78a", kind: "multi-extend",
		library: "node redlock 5.0.0-beta extend"},
	{file: "sesamecare-redlock-1.4.0-acquire.lua", sha: "1b77b94aa78451d55dfa97e18819bfbfc596cb5b", kind: "db-multi-acquire",
		library: "@sesamecare-oss/redlock 1.4.0 acquire"},
	{file: "sesamecare-redlock-1.4.0-release.lua", sha: "df51f6837dcfe303d334e6abea9aeae192bab216", kind: "db-multi-release-count",
		library: "@sesamecare-oss/redlock 1.4.0 release"},
	{file: "sesamecare-redlock-1.4.0-extend.lua", sha: "820e9778d2b6733e9ed771e4be90ae73a95a6f3b", kind: "db-multi-extend",
		library: "@sesamecare-oss/redlock 1.4.0 extend"},
	{file: "redis-py-4.3.4-release.lua", sha: "c3f8721cbb97f72bc19e972846bd7aaf91901658", kind: "compare-and-delete",
		library: "redis-py Lock 4.3.4-8.1.0 release"},
	{file: "redis-py-4.3.4-extend.lua", sha: "a4e8783852e6b949f9ef3a97212805108459a890", kind: "compare-and-add-or-set-pttl",
		library: "redis-py Lock 4.3.4-8.1.0 extend"},
	{file: "redis-py-4.3.4-reacquire.lua", sha: "1cac51482acf5858da00f6d685d68f886cd6b6b2", kind: "compare-and-pexpire",
		library: "redis-py Lock 4.3.4-8.1.0 reacquire"},
	{file: "redis-semaphore-5.8.0-mutex-release.lua", sha: "7157921a7cc7cfba979acf6d63f073151df17d12", kind: "compare-and-delete",
		library: "redis-semaphore 5.7-5.8 Mutex/RedlockMutex release"},
	{file: "redis-semaphore-5.8.0-mutex-refresh.lua", sha: "594683e49a64ebaf975caf5f8079a1d097c438f1", kind: "compare-and-pexpire",
		library: "redis-semaphore 5.7-5.8 Mutex/RedlockMutex refresh"},
	{file: "redsync-4.0.0-4.11.0-release.lua", sha: "00583931c4e4d483f6233879c133c71ed5393f9d", kind: "compare-and-delete",
		library: "go-redsync 4.0.0-4.11.0 release"},
	{file: "redsync-4.18.1-release.lua", sha: "e950836ed1e694540c503ef9972b8de518044d3b", kind: "compare-and-delete-or-absent",
		library: "go-redsync 4.12.0-4.18.1 release"},
	{file: "redsync-4.18.1-extend.lua", sha: "d75bb8b5bd13532ddedd17762e772346e39b321e", kind: "compare-and-pexpire",
		library: "go-redsync 4.0.0-4.18.1 extend"},
	{file: "redsync-4.18.1-extend-setnx.lua", sha: "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79", kind: "extend-or-acquire",
		library: "go-redsync 4.12.0-4.18.1 extend WithSetNXOnExtend"},
	{file: "pottery-3.0.1-release.lua", sha: "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80", kind: "compare-and-delete",
		library: "pottery 2.0-3.0.1 Redlock release"},
	{file: "pottery-3.0.1-extend.lua", sha: "ba015a80261b616e7a62d35df0b8e3edbe6c9414", kind: "compare-and-pexpire",
		library: "pottery 2.0-3.0.1 Redlock extend"},
	{file: "pottery-3.0.1-acquired-pttl.lua", sha: "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992", kind: "owner-pttl-or-zero",
		library: "pottery 2.0-3.0.1 Redlock locked()"},
	{file: "aioredlock-0.7.3-set-lock.lua", sha: "c75a9bf1538efcdb1f383acc3e273c5089d57e58", kind: "extend-or-acquire-or-error",
		library: "aioredlock 0.7.3 lock and extend"},
	{file: "aioredlock-0.7.3-unset-lock.lua", sha: "241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5", kind: "compare-and-delete-or-free-or-error",
		library: "aioredlock 0.7.3 unlock"},
	{file: "aioredlock-0.7.3-get-lock-ttl.lua", sha: "f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a", kind: "owner-ttl-seconds-or-error",
		library: "aioredlock 0.7.3 get_lock"},
	{file: "redlock-rb-2.0.6-release.lua", sha: "8e4905cee18e7c3188d10f2b8b170e403baed34f", kind: "compare-and-delete",
		library: "redlock-rb 1.3-2.0.6 unlock"},
	{file: "redlock-rb-2.0.6-acquire-extend.lua", sha: "ceb2b2062e40c51a2b3963fd078bc71f11bdc65c", kind: "set-if-owner-or-free",
		library: "redlock-rb 1.3-2.0.6 lock and extend"},
	{file: "redlock-rb-2.0.6-pttl.lua", sha: "78d2ca48a6dc9ef6892059792a3a0c5237733d64", kind: "value-and-pttl",
		library: "redlock-rb 1.3-2.0.6 get_remaining_ttl"},
	{file: "redlock-net-2.3.2-release-LF.lua", sha: "18b2a577dbe847b16bebde190d69a1613d68e60e", kind: "compare-and-delete",
		library: "RedLock.net 2.x unlock (LF)"},
	{file: "redlock-net-2.3.2-release-CRLF.lua", sha: "cb0427378f700ddb2f0e9394dbb0a40bd6dba04a", kind: "compare-and-delete",
		library: "RedLock.net 2.x unlock (CRLF)"},
	{file: "redlock-net-2.3.2-extend-LF.lua", sha: "9f614a785a5f9ae8c6396c6b4bf94d2087342603", kind: "extend-or-acquire-or-conflict",
		library: "RedLock.net 2.3.2 auto-extend (LF)"},
	{file: "redlock-net-2.3.2-extend-CRLF.lua", sha: "3e7c6bf3e080bb97a92e77362149c26252b98212", kind: "extend-or-acquire-or-conflict",
		library: "RedLock.net 2.3.2 auto-extend (CRLF)"},
	{file: "python-redis-lock-4.0.1-extend.lua", sha: "fed16109024d968d9496e4140fe1355bac05ebff", kind: "compare-and-expire-seconds",
		library: "python-redis-lock 4.0 extend"},
	{file: "shedlock-7.9.0-safe-extend.lua", sha: "67256370c2d1c87e2250898075542b1a7fa5b917", kind: "compare-and-pexpire",
		library: "ShedLock 6.7-7.9 safeUpdate extend"},
	{file: "spring-integration-5.4.12-obtain.lua", sha: "8426c8df41c64d8177dce3ecbbe9146ef3759cd2", kind: "extend-or-acquire-or-null",
		library: "Spring Integration RedisLockRegistry 5.4 obtain"},
	{file: "spring-integration-7.1.1-obtain.lua", sha: "175897a4e379e99e79a54937be09226f76cdcfe5", kind: "extend-or-acquire-or-null",
		library: "Spring Integration RedisLockRegistry 6.1-7.2 obtain"},
	{file: "spring-integration-7.1.1-renew.lua", sha: "879e0f7b8d83c3266d4e996627438c05dbda0b89", kind: "compare-and-pexpire-or-null",
		library: "Spring Integration RedisLockRegistry 6.4-7.2 renew"},
	{file: "spring-integration-7.1.1-spin-unlock.lua", sha: "f0f9038aa2b6d6c3436c72d147573ea2a58f0ef2", kind: "compare-and-delete-or-null",
		library: "Spring Integration RedisLockRegistry SPIN_LOCK unlock (6.0.7-7.2)"},
	{file: "spring-integration-6.5.10-spin-unlock-del.lua", sha: "356d97191f2b63031781ccc0e8e82f02e1995a90", kind: "compare-and-delete-or-null",
		library: "Spring Integration RedisLockRegistry SPIN_LOCK unlock without UNLINK (6.0.7-6.5)"},
	{file: "spring-integration-7.1.1-pubsub-unlock.lua", sha: "7a71e9443a2a41539fb115a5a27d5a748a871aed", kind: "compare-and-delete-publish-or-null",
		library: "Spring Integration PUB_SUB_LOCK unlock (6.0.7-7.2)"},
	{file: "spring-integration-6.5.10-pubsub-unlock-del.lua", sha: "b2dedc0ab01c17f9f20e3e6ddb62dcb6afbed0bd", kind: "compare-and-delete-publish-or-null",
		library: "Spring Integration PUB_SUB_LOCK unlock without UNLINK"},
	{file: "spring-integration-6.4.8-pubsub-unlock.lua", sha: "67aebbcba76d9674162e8906de1f669866f48e07", kind: "compare-and-delete-publish-key-or-null",
		library: "Spring Integration PUB_SUB_LOCK unlock (about 6.4.8-7.0.0-RC2)"},
	{file: "spring-integration-6.4.8-pubsub-unlock-del.lua", sha: "4d7192f70618a620282e427698f9cde890151e58", kind: "compare-and-delete-publish-key-or-null",
		library: "Spring Integration PUB_SUB_LOCK unlock without UNLINK (about 6.4.8-6.5.6)"},
	{file: "symfony-lock-5.3-save.lua", sha: "81523960da32c1f15ecab9f1f0fae74f7e943d07", kind: "extend-or-acquire",
		library: "Symfony Lock RedisStore <= 5.3 save (string locks)"},
	{file: "symfony-lock-5.3-putoffexpiration.lua", sha: "ae948f48c8da9feb2e215c474a412c605d33ff30", kind: "compare-and-pexpire",
		library: "Symfony Lock RedisStore <= 5.3 putOffExpiration"},
	{file: "symfony-lock-5.3-delete.lua", sha: "bec85b1c518b7ba0348a49c79b24adbb1ca95d3b", kind: "compare-and-delete",
		library: "Symfony Lock RedisStore <= 5.3 delete"},
	{file: "redisson-4.7.0-multilock-expire.lua", sha: "3fd750e0b43af99dbd223e5523718f18cded3664", kind: "pexpire-any",
		library: "Redisson 3.17-4.7 RedissonMultiLock/RedLock with a lease time"},
	{file: "redisson-4.7.0-fencedlock-acquire.lua", sha: "46b5551ba403d6152a7a6eca122e08728d6c8c66", kind: "redisson-fenced-acquire",
		library: "Redisson 3.27-4.7 RFencedLock lock"},
	{file: "redisson-4.7.0-fencedlock-acquire-token.lua", sha: "49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45", kind: "redisson-fenced-acquire-token",
		library: "Redisson 3.27-4.7 RFencedLock lockAndGetToken"},
	{file: "redisson-4.7.0-acquire.lua", sha: "149c5a8bf18676fd99e9e6e24923bd64d9b62f94", kind: "redisson-acquire",
		library: "Redisson 3.19-4.7 RLock acquire"},
	{file: "redisson-3.12.3-3.18.1-acquire.lua", sha: "dad0f8d619e548e04f21fb48d50be5034df3adae", kind: "redisson-acquire",
		library: "Redisson 3.12.3-3.18.1 RLock acquire"},
	{file: "redisson-4.7.0-release.lua", sha: "6866459238a13a701d42f4971f12d9f3a50e2442", kind: "redisson-release-latched",
		library: "Redisson 3.24-4.7 RLock release"},
	{file: "redisson-3.22.0-3.23.5-release.lua", sha: "778cea8aada230ae060b432fc333adaec85f2f4c", kind: "redisson-release-command",
		library: "Redisson 3.22-3.23 RLock release"},
	{file: "redisson-3.10.6-3.21.3-release.lua", sha: "3ffe249c16dee540ac8ab32e39bd408626b9aff7", kind: "redisson-release",
		library: "Redisson 3.10.6-3.21 RLock release"},
	{file: "redisson-4.7.0-forceunlock.lua", sha: "605e338249a7a1d40df83b04f7658354f883b41b", kind: "redisson-force-unlock-command",
		library: "Redisson 3.22-4.7 forceUnlock"},
	{file: "redisson-3.10.0-3.21.3-forceunlock.lua", sha: "7e9c80b3d786b95d5d4aaf8fd73adb9775fa6fb1", kind: "redisson-force-unlock",
		library: "Redisson 3.10-3.21 forceUnlock"},
	{file: "redisson-4.7.0-renew-watchdog-multikey.lua", sha: "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635", kind: "redisson-renew-batch",
		library: "Redisson 3.44-4.7 lock watchdog"},
	{file: "redisson-3.10.0-3.43.0-renew-watchdog.lua", sha: "8e19a1ddbdee9138df9f32a480c57addab4353d1", kind: "redisson-renew",
		library: "Redisson 3.10-3.43 lock watchdog"},
	{file: "redisson-4.7.0-readlock-acquire.lua", sha: "95553a6ff11176c18e71344e89d116b06fd6f753", kind: "redisson-read-acquire",
		library: "Redisson 3.11.1-4.7 RReadWriteLock read lock"},
	{file: "redisson-3.27.2-readlock-release.lua", sha: "5947c0fee6ca25ae094ec1b3e7a2559a9273d29f", kind: "redisson-read-release",
		library: "Redisson 3.24-3.43 RReadWriteLock read unlock"},
	{file: "redisson-4.7.0-readlock-release.lua", sha: "6e1b10e11ac0a3ed8e902562ecd32ce01b553039", kind: "redisson-read-release-free-null",
		library: "Redisson 3.44-4.7 RReadWriteLock read unlock"},
	{file: "redisson-4.7.0-writelock-acquire.lua", sha: "6306ba3bf1f563b284bed52d305fce615c6664d9", kind: "redisson-write-acquire",
		library: "Redisson 3.10-4.7 RReadWriteLock write lock"},
	{file: "redisson-3.27.2-writelock-release.lua", sha: "d29c5559782035515d32e926762830b3304b49be", kind: "redisson-write-release",
		library: "Redisson 3.24-3.43 RReadWriteLock write unlock"},
	{file: "redisson-4.7.0-writelock-release.lua", sha: "21f5fb0f8ddfa9be5c3e0c9757c128796add75c6", kind: "redisson-write-release-free-null",
		library: "Redisson 3.44-4.7 RReadWriteLock write unlock"},
	{file: "redisson-3.27.2-readlock-renew-watchdog.lua", sha: "6563941ff57e01b8cf61e86907b80686438a2f74", kind: "redisson-read-renew",
		library: "Redisson 3.10-3.43 RReadWriteLock read lock watchdog"},
	{file: "redisson-4.7.0-readlock-renew-watchdog-multikey.lua", sha: "38d2b478dfbe264ab67c221b7e4be62245f00ba0", kind: "redisson-read-renew-batch",
		library: "Redisson 4.6.1-4.7 RReadWriteLock read lock watchdog"},
	{file: "redisson-4.7.0-readlock-forceunlock.lua", sha: "27dbe744e95c1d854a7f556cc6817030de2d0d01", kind: "redisson-read-force-unlock",
		library: "Redisson 3.22-4.7 RReadWriteLock read lock forceUnlock"},
	{file: "redisson-4.7.0-writelock-forceunlock.lua", sha: "2e2cb2a3b13e2e80e4236ef6a25beaf365dba608", kind: "redisson-write-force-unlock",
		library: "Redisson 3.22-4.7 RReadWriteLock write lock forceUnlock"},
	{file: "redisson-4.7.0-readlock-islocked.lua", sha: "8ad44f1ba014938c20da38206b6d496c85ec1aed", kind: "redisson-read-locked",
		library: "Redisson 3.24-4.7 RReadWriteLock read lock isLocked (before 3.24, HGET of mode)"},
	{file: "redisson-3.10.0-3.11.0-readlock-acquire.lua", sha: "3e6597e1d1157c59ac0d6efa2ba7e92ef418c41e", kind: "redisson-read-acquire-lease",
		library: "Redisson 3.10.0-3.11.0 RReadWriteLock read lock"},
	{file: "redisson-3.10.0-3.21.3-readlock-release.lua", sha: "f5469be4bfe5232d519471092634b3ee84e5ee6f", kind: "redisson-read-release-publish",
		library: "Redisson 3.10-3.21 RReadWriteLock read unlock"},
	{file: "redisson-3.22.0-3.23.5-readlock-release.lua", sha: "92a54c31a4dc3b46f81e24a6dd5bb7d677c6f882", kind: "redisson-read-release-command",
		library: "Redisson 3.22-3.23 RReadWriteLock read unlock"},
	{file: "redisson-3.10.0-3.21.3-writelock-release.lua", sha: "baa634f6184acc1b8f145e810a0e0e00967a3cbe", kind: "redisson-write-release-publish",
		library: "Redisson 3.10-3.21 RReadWriteLock write unlock"},
	{file: "redisson-3.22.0-3.23.5-writelock-release.lua", sha: "319a1cdf1b56c767a0a9adf2224250bf811f110c", kind: "redisson-write-release-command",
		library: "Redisson 3.22-3.23 RReadWriteLock write unlock"},
	{file: "redisson-3.10.0-3.21.3-readlock-forceunlock.lua", sha: "23f9bc91439172625235ce2ee06d6647f08a7e27", kind: "redisson-read-force-unlock-publish",
		library: "Redisson 3.10-3.21 RReadWriteLock read lock forceUnlock"},
	{file: "redisson-3.10.0-3.21.3-writelock-forceunlock.lua", sha: "23639b0b2d18d26ce352e148ff4ac5b8e984b696", kind: "redisson-write-force-unlock-publish",
		library: "Redisson 3.10-3.21 RReadWriteLock write lock forceUnlock"},
	{file: "redisson-4.0.0-4.3.1-readlock-renew-watchdog-multikey.lua", sha: "d6564f42b98d6eece0e940a478ee248f80b8a90a", kind: "redisson-read-renew-pairs",
		library: "Redisson 4.0-4.3 RReadWriteLock read lock watchdog"},
	{file: "redisson-3.44.0-3.52.0-readlock-renew-watchdog-multikey.lua", sha: "1affef780a01e1406cb1968c62918f618d10d6a3", kind: "redisson-read-renew-pairs-hidden",
		library: "Redisson 3.44-3.52 RReadWriteLock read lock watchdog"},

	{file: "redisson-3.27.2-fairlock-acquire.lua", sha: "762bfafa6be221431a0b668685dd15c926483619", library: "Redisson 3.27 RFairLock lock",
		reason: redissonFairReason},
	{file: "redisson-3.27.2-fairlock-tryacquire.lua", sha: "aa0a28d2eb7cbeb50151315a58eb75302d8dfa40", library: "Redisson 3.27 RFairLock tryLock",
		reason: redissonFairReason},
	{file: "redisson-3.27.2-fairlock-release.lua", sha: "ca303f8587d0942f8a0021f62338626ca4dd0118", library: "Redisson 3.27 RFairLock unlock",
		reason: redissonFairReason},
	{file: "redisson-4.7.0-fairlock-acquire.lua", sha: "8f6ed299ffd259f0539c20f89253998c0777ea75", library: "Redisson 4.7 RFairLock lock",
		reason: redissonFairReason},
	{file: "redisson-4.7.0-fairlock-tryacquire.lua", sha: "d20501c26a30adf6fb0fe9883bbbcc497e6157e2", library: "Redisson 4.7 RFairLock tryLock",
		reason: redissonFairReason},
	{file: "redisson-4.7.0-fairlock-release.lua", sha: "367f80bd2e300e411fb0936d9b601e5bcb3fd4b6", library: "Redisson 4.7 RFairLock unlock",
		reason: redissonFairReason},
	{file: "redisson-4.7.0-fairlock-leave-queue.lua", sha: "d1ddef65ad80886b5d36e023c99930044ddd653a", library: "Redisson 3.27-4.7 RFairLock tryLock giving up its place",
		reason: redissonFairReason},
	{file: "redisson-3.27.2-fairlock-forceunlock.lua", sha: "047c11d7fec40d0102fe9903ff1e19e9a1dec610", library: "Redisson 3.27 RFairLock forceUnlock",
		reason: redissonFairReason},
	{file: "redisson-4.7.0-fairlock-forceunlock.lua", sha: "71ed11d4e4818119ac560b3d670a7f08256afc46", library: "Redisson 4.7 RFairLock forceUnlock",
		reason: redissonFairReason},
	{file: "symfony-lock-7.2-dev-probe-support-time.lua", sha: "c481d49b4a48e48a9eeacd5d51655b5fcbb19925", library: "Symfony Lock RedisStore 5.4-7.x TIME probe",
		reason: "probes TIME inside scripts to choose between the sorted-set scripts' variants"},
	{file: "symfony-lock-7.2-dev-save-time.lua", sha: "6fdee501a3714553b74c0d67687b921b90b05d18", library: "Symfony Lock RedisStore 5.4-7.x save",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-save-argv.lua", sha: "abdbb1413a25737fc4cfb9cf79ace1a22dad6ab3", library: "Symfony Lock RedisStore 5.4-7.x save (client time)",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-saveread-time.lua", sha: "b5745b5be27d9033eb5d3eb254df2faf502b88df", library: "Symfony Lock RedisStore 5.4-7.x saveRead",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-saveread-argv.lua", sha: "dee54f77398d3c6d122b4111f3af8ccf1a93ac93", library: "Symfony Lock RedisStore 5.4-7.x saveRead (client time)",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-putoffexpiration-time.lua", sha: "63be12a3515941092212f15c08327d60916de9fa", library: "Symfony Lock RedisStore 5.4-7.x putOffExpiration",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-putoffexpiration-argv.lua", sha: "fe7bee082a8220c6b621ace999a1ab57c4ab5145", library: "Symfony Lock RedisStore 5.4-7.x putOffExpiration (client time)",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-exists-time.lua", sha: "3b6bdbbe16f821f49177b16c7707f331f015a779", library: "Symfony Lock RedisStore 5.4-7.x exists",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-exists-argv.lua", sha: "e27f94ac94f5d96f23f2e8697462233b6349a566", library: "Symfony Lock RedisStore 5.4-7.x exists (client time)",
		reason: symfonyReason},
	{file: "symfony-lock-7.2-dev-delete.lua", sha: "a70f7f5087a0cb2c2c9ca50d1f64e234c2628f0c", library: "Symfony Lock RedisStore 5.4-7.x delete",
		reason: symfonyReason},
	{file: "python-redis-lock-4.0.1-release.lua", sha: "90da91872223f85eb1376a17e3c4df21ace8c54b", kind: "compare-and-delete-and-signal",
		library: "python-redis-lock 4.0 release"},
	{file: "python-redis-lock-4.0.1-reset.lua", sha: "afbc8014508f92e446b56567e8ba600e811c1bd5", kind: "delete-and-signal",
		library: "python-redis-lock 4.0 reset"},
	{file: "python-redis-lock-4.0.1-reset-all.lua", sha: "b121d3548d693116c3851b63befe947e49f28c7c", kind: "delete-all-locks-and-signal",
		library: "python-redis-lock 4.0 reset_all"},
}

const symfonyReason = "locks are sorted sets of tokens scored by expiry (ZADD, ZSCORE, ZREMRANGEBYSCORE, PEXPIREAT), with shared read locks, timed by TIME or the client's clock"

const unrecognised = "<unrecognised>"

func wantKind(kind string) string {
	if kind == "" {
		return unrecognised
	}
	return kind
}

// TestRealScriptFiles checks the table against testdata: every file is in
// it with its SHA1, is recognised as its kind by meaning, and the SHA1
// fast path agrees with the meaning.
func TestRealScriptFiles(t *testing.T) {
	entries, err := os.ReadDir("testdata/scripts")
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, s := range realScripts {
		inTable[s.file] = true
	}
	for _, e := range entries {
		if !inTable[e.Name()] {
			t.Errorf("testdata/scripts/%s is not in realScripts", e.Name())
		}
	}
	for _, s := range realScripts {
		t.Run(s.file, func(t *testing.T) {
			body := readScript(t, s.file)
			if exp, got := s.sha, sha1Hex(body); exp != got {
				t.Fatalf("sha1: want %s, got %s (the file is not the published body)", exp, got)
			}
			if (s.kind == "") == (s.reason == "") {
				t.Fatalf("a row has a kind or a reason for refusing, not both")
			}
			if exp, got := wantKind(s.kind), kindName(classify(body)); exp != got {
				form, err := luaform.Form(body)
				t.Fatalf("kind by meaning: want %s, got %s; form (%v):\n%s", exp, got, err, form)
			}
			if exp, got := wantKind(s.kind), kindName(known[s.sha]); exp != got {
				t.Fatalf("kind by digest: want %s, got %s", exp, got)
			}
		})
	}
}

// TestDigestsHaveBodies checks that every SHA1 the fast path answers is a
// body in testdata that means the same kind.
func TestDigestsHaveBodies(t *testing.T) {
	bySHA := map[string]string{}
	for _, s := range realScripts {
		bySHA[s.sha] = s.kind
	}
	for _, k := range scriptKinds {
		for _, d := range k.digests {
			if exp, got := k.name, bySHA[d]; exp != got {
				t.Errorf("digest %s of %s: realScripts has kind %q", d, k.name, got)
			}
		}
	}
}

// scriptCase is one EVAL of a kind's scripts: the Locker answers with
// answer, and the reply (RESP2; RESP3 differs only in "_" nulls) and the
// Locker calls must be exactly these.
type scriptCase struct {
	name       string
	keys, args []string
	answer     func(call) (any, error)
	want       string
	calls      []string
}

var noQuorum = fails(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3})

const (
	noQuorumReply = "-NOQUORUM 1 of 3 backends answered, 2 needed\r\n"
	nullReply     = "$-1\r\n"
	okReply       = "+OK\r\n"
)

// byKey answers each call by its key.
func byKey(answers map[string]func(call) (any, error)) func(call) (any, error) {
	return func(c call) (any, error) { return answers[c.key](c) }
}

// byOp answers each call by its operation.
func byOp(answers map[string]func(call) (any, error)) func(call) (any, error) {
	return func(c call) (any, error) { return answers[c.op](c) }
}

// kindCases are the outcomes of each kind; every script of the kind is run
// through each, and through a no-quorum answer to its first call.
var kindCases = map[string][]scriptCase{
	"compare-and-delete": {
		{name: "released", keys: []string{"k"}, args: []string{"tok"}, want: ":1\r\n", calls: []string{"release k tok"}},
		{name: "not held", keys: []string{"k"}, args: []string{"tok"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"release k tok"}},
		{name: "absent", keys: []string{"k"}, args: []string{"tok"}, answer: fails(quorum.ErrAbsent), want: ":0\r\n", calls: []string{"release k tok"}},
	},
	"compare-and-pexpire": {
		{name: "extended", keys: []string{"k"}, args: []string{"tok", "5000"}, want: ":1\r\n", calls: []string{"extend k tok 5s"}},
		{name: "not held", keys: []string{"k"}, args: []string{"tok", "5000"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"extend k tok 5s"}},
		{name: "ttl not a number", keys: []string{"k"}, args: []string{"tok", "soon"}, want: "-ERR value is not an integer or out of range\r\n"},
		{name: "ttl zero", keys: []string{"k"}, args: []string{"tok", "0"}, want: "-ERR invalid expire time in 'pexpire' command\r\n"},
	},
	"compare-and-pexpireat": {
		{name: "extended", keys: []string{"k"}, args: []string{"tok", stoppedAt(5000)}, want: ":1\r\n", calls: []string{"extend k tok 5s"}},
		{name: "a time past releases", keys: []string{"k"}, args: []string{"tok", "1000"}, want: ":1\r\n", calls: []string{"release k tok"}},
		{name: "not held", keys: []string{"k"}, args: []string{"tok", "1000"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"release k tok"}},
		{name: "time not a number", keys: []string{"k"}, args: []string{"tok", "soon"}, want: "-ERR value is not an integer or out of range\r\n"},
	},
	"compare-and-delete-or-absent": {
		{name: "released", keys: []string{"k"}, args: []string{"tok"}, want: ":1\r\n", calls: []string{"release k tok"}},
		{name: "held by another", keys: []string{"k"}, args: []string{"tok"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"release k tok"}},
		{name: "absent", keys: []string{"k"}, args: []string{"tok"}, answer: fails(quorum.ErrAbsent), want: ":-1\r\n", calls: []string{"release k tok"}},
	},
	"compare-and-delete-or-null": {
		{name: "released", keys: []string{"k"}, args: []string{"id"}, want: ":1\r\n", calls: []string{"release k id"}},
		{name: "not held", keys: []string{"k"}, args: []string{"id"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"release k id"}},
	},
	"compare-and-delete-publish-or-null": {
		{name: "released", keys: []string{"reg:k"}, args: []string{"id", "reg-channel:reg:k"}, want: ":1\r\n", calls: []string{"release reg:k id"}},
		{name: "not held", keys: []string{"reg:k"}, args: []string{"id", "reg-channel:reg:k"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"release reg:k id"}},
	},
	"compare-and-delete-publish-key-or-null": {
		{name: "released", keys: []string{"reg:k", "reg-channel:reg:k"}, args: []string{"id"}, want: ":1\r\n", calls: []string{"release reg:k id"}},
		{name: "not held", keys: []string{"reg:k", "reg-channel:reg:k"}, args: []string{"id"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"release reg:k id"}},
	},
	"compare-and-pexpire-or-null": {
		{name: "renewed", keys: []string{"k"}, args: []string{"id", "60000"}, want: ":1\r\n", calls: []string{"extend k id 1m0s"}},
		{name: "not held", keys: []string{"k"}, args: []string{"id", "60000"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"extend k id 1m0s"}},
	},
	"compare-and-add-or-set-pttl": {
		{name: "add", keys: []string{"k"}, args: []string{"tok", "2500", "0"}, want: ":1\r\n", calls: []string{"extendby k tok 2.5s"}},
		{name: "replace", keys: []string{"k"}, args: []string{"tok", "2500", "1"}, want: ":1\r\n", calls: []string{"extend k tok 2.5s"}},
		{name: "add not held", keys: []string{"k"}, args: []string{"tok", "2500", "0"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"extendby k tok 2.5s"}},
		{name: "replace not held", keys: []string{"k"}, args: []string{"tok", "2500", "1"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"extend k tok 2.5s"}},
		{name: "add beyond max", keys: []string{"k"}, args: []string{"tok", "50000", "0"}, answer: fails(&quorum.TTLError{TTL: 70 * time.Second, Max: time.Minute}),
			want: "-ERR invalid expire time: 70000 ms exceeds max_ttl 60000 ms\r\n", calls: []string{"extendby k tok 50s"}},
	},
	"extend-or-acquire": {
		{name: "extended or taken", keys: []string{"k"}, args: []string{"v", "8000"}, want: ":1\r\n", calls: []string{"extendoracquire k v 8s"}},
		{name: "held by another", keys: []string{"k"}, args: []string{"v", "8000"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"extendoracquire k v 8s"}},
	},
	"extend-or-acquire-or-null": {
		{name: "obtained", keys: []string{"reg:path"}, args: []string{"id", "60000"}, want: ":1\r\n", calls: []string{"extendoracquire reg:path id 1m0s"}},
		{name: "held by another", keys: []string{"reg:path"}, args: []string{"id", "60000"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"extendoracquire reg:path id 1m0s"}},
	},
	"extend-or-acquire-or-conflict": {
		{name: "extended", keys: []string{"redlock:r"}, args: []string{"guid", "30000"}, want: ":1\r\n", calls: []string{"extendoracquire redlock:r guid 30s"}},
		{name: "conflicted", keys: []string{"redlock:r"}, args: []string{"guid", "30000"}, answer: fails(quorum.ErrNotHeld), want: ":-1\r\n", calls: []string{"extendoracquire redlock:r guid 30s"}},
	},
	"extend-or-acquire-or-error": {
		{name: "taken or extended", keys: []string{"res"}, args: []string{"id", "10000"}, want: okReply, calls: []string{"extendoracquire res id 10s"}},
		{name: "held by another", keys: []string{"res"}, args: []string{"id", "10000"}, answer: fails(quorum.ErrNotHeld), want: "-ERR ERROR\r\n", calls: []string{"extendoracquire res id 10s"}},
		{name: "ttl zero", keys: []string{"res"}, args: []string{"id", "0"}, want: "-ERR invalid expire time in 'set' command\r\n"},
	},
	"compare-and-delete-or-free-or-error": {
		{name: "released", keys: []string{"res"}, args: []string{"id"}, want: ":1\r\n", calls: []string{"release res id"}},
		{name: "free", keys: []string{"res"}, args: []string{"id"}, answer: fails(quorum.ErrAbsent), want: okReply, calls: []string{"release res id"}},
		{name: "held by another", keys: []string{"res"}, args: []string{"id"}, answer: fails(quorum.ErrNotHeld), want: "-ERR ERROR\r\n", calls: []string{"release res id"}},
	},
	"owner-ttl-seconds-or-error": {
		{name: "held", keys: []string{"res"}, args: []string{"id"}, answer: returns(9500 * time.Millisecond), want: ":10\r\n", calls: []string{"ownerpttl res id"}},
		{name: "held, rounded down", keys: []string{"res"}, args: []string{"id"}, answer: returns(9499 * time.Millisecond), want: ":9\r\n", calls: []string{"ownerpttl res id"}},
		{name: "not held", keys: []string{"res"}, args: []string{"id"}, answer: fails(quorum.ErrNotHeld), want: "-ERR ERROR\r\n", calls: []string{"ownerpttl res id"}},
		{name: "free", keys: []string{"res"}, args: []string{"id"}, answer: fails(quorum.ErrNotFound), want: "-ERR ERROR\r\n", calls: []string{"ownerpttl res id"}},
		{name: "no expiry", keys: []string{"res"}, args: []string{"id"}, answer: fails(quorum.ErrNoExpiry), want: ":-1\r\n", calls: []string{"ownerpttl res id"}},
	},
	"set-if-owner-or-free": {
		{name: "lock", keys: []string{"res"}, args: []string{"uuid", "3000", "yes"}, want: okReply, calls: []string{"extendoracquire res uuid 3s"}},
		{name: "extend only if locked", keys: []string{"res"}, args: []string{"uuid", "3000", "no"}, want: okReply, calls: []string{"extend res uuid 3s"}},
		{name: "lock held by another", keys: []string{"res"}, args: []string{"uuid", "3000", "yes"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"extendoracquire res uuid 3s"}},
		{name: "extend not held", keys: []string{"res"}, args: []string{"uuid", "3000", "no"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"extend res uuid 3s"}},
	},
	"acquire": {
		{name: "acquired", keys: []string{"k"}, args: []string{"v", "10000"}, want: okReply, calls: []string{"acquire k v 10s"}},
		{name: "held", keys: []string{"k"}, args: []string{"v", "10000"}, answer: fails(quorum.ErrNotAcquired), want: nullReply, calls: []string{"acquire k v 10s"}},
		{name: "ttl negative", keys: []string{"k"}, args: []string{"v", "-5"}, want: "-ERR invalid expire time in 'set' command\r\n"},
	},
	"delete-all-locks-and-signal": {
		{name: "cannot list", want: "-ERR this lockproxy cannot list locks\r\n"},
	},
	"acquire-at": {
		{name: "acquired", keys: []string{"k"}, args: []string{"v", stoppedAt(10000)}, want: okReply, calls: []string{"acquire k v 10s"}},
		{name: "held", keys: []string{"k"}, args: []string{"v", stoppedAt(10000)}, answer: fails(quorum.ErrNotAcquired), want: nullReply, calls: []string{"acquire k v 10s"}},
		{name: "a time past", keys: []string{"k"}, args: []string{"v", "1000"}, want: "-ERR invalid expire time in 'set' command\r\n"},
		{name: "not a number", keys: []string{"k"}, args: []string{"v", "soon"}, want: "-ERR value is not an integer or out of range\r\n"},
	},
	"acquire-or-renew": {
		{name: "obtained", keys: []string{"k"}, args: []string{"tokmeta", "3", "10000"}, want: okReply, calls: []string{"acquireorrenew/3 k tokmeta 10s"}},
		{name: "held", keys: []string{"k"}, args: []string{"tokmeta", "3", "10000"}, answer: fails(quorum.ErrNotAcquired), want: nullReply, calls: []string{"acquireorrenew/3 k tokmeta 10s"}},
		{name: "token length not a number", keys: []string{"k"}, args: []string{"tokmeta", "x", "10000"},
			want: "-ERR lockproxy needs a token length between 0 and the value's 7 bytes (got \"x\")\r\n"},
		{name: "token length beyond value", keys: []string{"k"}, args: []string{"tokmeta", "8", "10000"},
			want: "-ERR lockproxy needs a token length between 0 and the value's 7 bytes (got \"8\")\r\n"},
	},
	"owner-pttl": {
		{name: "held", keys: []string{"k"}, args: []string{"tok"}, answer: returns(1500 * time.Millisecond), want: ":1500\r\n", calls: []string{"ownerpttl k tok"}},
		{name: "not held", keys: []string{"k"}, args: []string{"tok"}, answer: fails(quorum.ErrNotHeld), want: ":-3\r\n", calls: []string{"ownerpttl k tok"}},
		{name: "no expiry", keys: []string{"k"}, args: []string{"tok"}, answer: fails(quorum.ErrNoExpiry), want: ":-1\r\n", calls: []string{"ownerpttl k tok"}},
	},
	"owner-pttl-or-zero": {
		{name: "held", keys: []string{"redlock:k"}, args: []string{"uuid"}, answer: returns(1500 * time.Millisecond), want: ":1500\r\n", calls: []string{"ownerpttl redlock:k uuid"}},
		{name: "not held", keys: []string{"redlock:k"}, args: []string{"uuid"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"ownerpttl redlock:k uuid"}},
		{name: "no expiry", keys: []string{"redlock:k"}, args: []string{"uuid"}, answer: fails(quorum.ErrNoExpiry), want: ":0\r\n", calls: []string{"ownerpttl redlock:k uuid"}},
	},
	"value-and-pttl": {
		{name: "held", keys: []string{"res"}, answer: byOp(map[string]func(call) (any, error){"get": returns("v1"), "ownerpttl": returns(900 * time.Millisecond)}),
			want: "*2\r\n$2\r\nv1\r\n:900\r\n", calls: []string{"get res", "ownerpttl res v1"}},
		{name: "free", keys: []string{"res"}, answer: fails(quorum.ErrNotFound), want: "*2\r\n$-1\r\n:-2\r\n", calls: []string{"get res"}},
		{name: "value changed", keys: []string{"res"}, answer: byOp(map[string]func(call) (any, error){"get": returns("v1"), "ownerpttl": fails(quorum.ErrNotHeld)}),
			want: "*2\r\n$-1\r\n:-2\r\n", calls: []string{"get res", "ownerpttl res v1"}},
		{name: "no expiry", keys: []string{"res"}, answer: byOp(map[string]func(call) (any, error){"get": returns("v1"), "ownerpttl": fails(quorum.ErrNoExpiry)}),
			want: "*2\r\n$2\r\nv1\r\n:-1\r\n", calls: []string{"get res", "ownerpttl res v1"}},
	},
	"compare-and-expire-seconds": {
		{name: "extended", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "30"}, want: ":0\r\n", calls: []string{"extend lock:n id 30s"}},
		{name: "not owner", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "30"}, answer: fails(quorum.ErrNotHeld), want: ":1\r\n", calls: []string{"extend lock:n id 30s"}},
	},
	"compare-and-delete-and-signal": {
		{name: "released", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "1000"}, want: ":0\r\n", calls: []string{"release lock:n id"}},
		{name: "not owner", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "1000"}, answer: fails(quorum.ErrNotHeld), want: ":1\r\n", calls: []string{"release lock:n id"}},
		{name: "absent", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "1000"}, answer: fails(quorum.ErrAbsent), want: ":1\r\n", calls: []string{"release lock:n id"}},
		{name: "signal expiry not a number", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "soon"}, want: "-ERR value is not an integer or out of range\r\n"},
	},
	"delete-and-signal": {
		{name: "deleted", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "1000"}, answer: returns(true), want: ":1\r\n", calls: []string{"delete lock:n"}},
		{name: "absent", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "1000"}, want: ":0\r\n", calls: []string{"delete lock:n"}},
		{name: "signal expiry not a number", keys: []string{"lock:n", "lock-signal:n"}, args: []string{"id", "soon"}, want: "-ERR value is not an integer or out of range\r\n"},
	},
	"multi-acquire": {
		{name: "all", keys: []string{"a", "b"}, args: []string{"v", "5000"}, want: ":2\r\n", calls: []string{"acquireall a,b v 5s"}},
		{name: "one", keys: []string{"a"}, args: []string{"v", "5000"}, want: ":1\r\n", calls: []string{"acquireall a v 5s"}},
		{name: "held", keys: []string{"a", "b"}, args: []string{"v", "5000"}, answer: fails(quorum.ErrNotAcquired), want: ":0\r\n", calls: []string{"acquireall a,b v 5s"}},
	},
	"multi-release-count": {
		{name: "all", keys: []string{"a", "b", "c"}, args: []string{"v"}, want: ":3\r\n", calls: []string{"releaseall a,b,c v"}},
		{name: "not held", keys: []string{"a", "b", "c"}, args: []string{"v"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"releaseall a,b,c v"}},
		{name: "a key twice", keys: []string{"a", "a"}, args: []string{"v"}, want: ":1\r\n", calls: []string{"releaseall a v"}},
	},
	"multi-extend": {
		{name: "all", keys: []string{"a", "b"}, args: []string{"v", "5000"}, want: ":2\r\n", calls: []string{"extendall a,b v 5s"}},
		{name: "not held", keys: []string{"a", "b"}, args: []string{"v", "5000"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"extendall a,b v 5s"}},
	},
	"db-multi-acquire": {
		{name: "all", keys: []string{"a", "b"}, args: []string{"0", "v", "5000"}, want: ":2\r\n", calls: []string{"acquireall a,b v 5s"}},
		{name: "held", keys: []string{"a", "b"}, args: []string{"0", "v", "5000"}, answer: fails(quorum.ErrNotAcquired), want: ":0\r\n", calls: []string{"acquireall a,b v 5s"}},
		{name: "another db", keys: []string{"a", "b"}, args: []string{"3", "v", "5000"}, want: "-ERR lockproxy serves db 0 only (the script selects db \"3\")\r\n"},
	},
	"db-multi-release-count": {
		{name: "all", keys: []string{"a", "b"}, args: []string{"0", "v"}, want: ":2\r\n", calls: []string{"releaseall a,b v"}},
		{name: "not held", keys: []string{"a", "b"}, args: []string{"0", "v"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"releaseall a,b v"}},
		{name: "another db", keys: []string{"a"}, args: []string{"1", "v"}, want: "-ERR lockproxy serves db 0 only (the script selects db \"1\")\r\n"},
		{name: "a key twice", keys: []string{"a", "b", "a"}, args: []string{"0", "v"}, want: ":2\r\n", calls: []string{"releaseall a,b v"}},
	},
	"db-multi-extend": {
		{name: "all", keys: []string{"a", "b"}, args: []string{"0", "v", "5000"}, want: ":2\r\n", calls: []string{"extendall a,b v 5s"}},
		{name: "not held", keys: []string{"a", "b"}, args: []string{"0", "v", "5000"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"extendall a,b v 5s"}},
		{name: "another db", keys: []string{"a"}, args: []string{"x", "v", "5000"}, want: "-ERR lockproxy serves db 0 only (the script selects db \"x\")\r\n"},
	},
	"multi-acquire-or-renew": {
		{name: "one key", keys: []string{"a"}, args: []string{"tokmeta", "3", "5000"}, want: okReply, calls: []string{"acquireorrenew/3 a tokmeta 5s"}},
		{name: "keys", keys: []string{"a", "b"}, args: []string{"tokmeta", "3", "5000"}, want: okReply, calls: []string{"acquireall a,b tokmeta 5s"}},
		{name: "one key held", keys: []string{"a"}, args: []string{"tokmeta", "3", "5000"}, answer: fails(quorum.ErrNotAcquired), want: nullReply, calls: []string{"acquireorrenew/3 a tokmeta 5s"}},
		{name: "keys held", keys: []string{"a", "b"}, args: []string{"tokmeta", "3", "5000"}, answer: fails(quorum.ErrNotAcquired), want: nullReply, calls: []string{"acquireall a,b tokmeta 5s"}},
		{name: "one key twice", keys: []string{"a", "a"}, args: []string{"tokmeta", "3", "5000"}, want: okReply, calls: []string{"acquireorrenew/3 a tokmeta 5s"}},
	},
	"multi-release-all": {
		{name: "released", keys: []string{"a", "b"}, args: []string{"v"}, want: okReply, calls: []string{"releaseall a,b v"}},
		{name: "not held", keys: []string{"a", "b"}, args: []string{"v"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"releaseall a,b v"}},
	},
	"multi-pexpire-all": {
		{name: "refreshed", keys: []string{"a", "b"}, args: []string{"v", "5000"}, want: okReply, calls: []string{"extendall a,b v 5s"}},
		{name: "not held", keys: []string{"a", "b"}, args: []string{"v", "5000"}, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"extendall a,b v 5s"}},
	},
	"multi-owner-pttl": {
		{name: "least", keys: []string{"a", "b"}, args: []string{"v"},
			answer: byKey(map[string]func(call) (any, error){"a": returns(3 * time.Second), "b": returns(1200 * time.Millisecond)}),
			want:   ":1200\r\n", calls: []string{"ownerpttl a v", "ownerpttl b v"}},
		{name: "one key", keys: []string{"a"}, args: []string{"v"}, answer: returns(3 * time.Second), want: ":3000\r\n", calls: []string{"ownerpttl a v"}},
		{name: "none positive", keys: []string{"a", "b"}, args: []string{"v"}, answer: returns(time.Duration(0)), want: ":0\r\n", calls: []string{"ownerpttl a v", "ownerpttl b v"}},
		{name: "one not held", keys: []string{"a", "b"}, args: []string{"v"},
			answer: byKey(map[string]func(call) (any, error){"a": returns(3 * time.Second), "b": fails(quorum.ErrNotHeld)}),
			want:   nullReply, calls: []string{"ownerpttl a v", "ownerpttl b v"}},
		{name: "one without expiry", keys: []string{"a", "b"}, args: []string{"v"},
			answer: byKey(map[string]func(call) (any, error){"a": returns(3 * time.Second), "b": fails(quorum.ErrNoExpiry)}),
			want:   ":3000\r\n", calls: []string{"ownerpttl a v", "ownerpttl b v"}},
	},
	"redisson-acquire": {
		{name: "acquired", keys: []string{"lock"}, args: []string{"30000", "uuid:1"}, want: nullReply, calls: []string{"hashacquire lock uuid:1 30s"}},
		{name: "held", keys: []string{"lock"}, args: []string{"30000", "uuid:1"}, answer: failsWith(quorum.Result{HolderTTL: 1234 * time.Millisecond}, quorum.ErrNotAcquired),
			want: ":1234\r\n", calls: []string{"hashacquire lock uuid:1 30s"}},
		{name: "lease beyond max", keys: []string{"lock"}, args: []string{"90000", "uuid:1"}, answer: fails(&quorum.TTLError{TTL: 90 * time.Second, Max: time.Minute}),
			want:  "-ERR invalid expire time: Redisson's lease of 90000 ms exceeds max_ttl 60000 ms (a lock taken without a lease time has Config.lockWatchdogTimeout's, 30 s by default: set max_ttl to at least that)\r\n",
			calls: []string{"hashacquire lock uuid:1 1m30s"}},
		{name: "split, another holds it somewhere", keys: []string{"lock"}, args: []string{"30000", "uuid:1"},
			answer: failsWith(quorum.Result{HolderTTL: 900 * time.Millisecond}, &quorum.NoQuorumError{Counted: 2, Agreed: 2, Needed: 3, Total: 5}),
			want:   ":900\r\n", calls: []string{"hashacquire lock uuid:1 30s"}},
		{name: "lease not a number", keys: []string{"lock"}, args: []string{"long", "uuid:1"}, want: "-ERR value is not an integer or out of range\r\n"},
	},
	"redisson-fenced-acquire": {
		{name: "acquired", keys: []string{"lock", "redisson_lock_token:{lock}"}, args: []string{"30000", "uuid:1"},
			answer: returns(quorum.Result{Fence: 1795697242514133}), want: nullReply, calls: []string{"hashacquire lock uuid:1 30s"}},
		{name: "held", keys: []string{"lock", "redisson_lock_token:{lock}"}, args: []string{"30000", "uuid:1"},
			answer: failsWith(quorum.Result{HolderTTL: 700 * time.Millisecond}, quorum.ErrNotAcquired), want: ":700\r\n", calls: []string{"hashacquire lock uuid:1 30s"}},
	},
	"redisson-fenced-acquire-token": {
		{name: "acquired", keys: []string{"lock", "redisson_lock_token:{lock}"}, args: []string{"30000", "uuid:1"},
			answer: returns(quorum.Result{Fence: 1795697242514133}), want: "*2\r\n:-1\r\n:1795697242514133\r\n", calls: []string{"hashacquire lock uuid:1 30s"}},
		{name: "held", keys: []string{"lock", "redisson_lock_token:{lock}"}, args: []string{"30000", "uuid:1"},
			answer: failsWith(quorum.Result{HolderTTL: 700 * time.Millisecond}, quorum.ErrNotAcquired), want: "*2\r\n:700\r\n:-1\r\n", calls: []string{"hashacquire lock uuid:1 30s"}},
	},
	"redisson-release-latched": {
		{name: "released", keys: []string{"lock", "redisson_lock__channel:{lock}", "redisson_unlock_latch:{lock}:ab"}, args: []string{"0", "30000", "uuid:1", "PUBLISH", "13500"},
			answer: returns(quorum.Result{Released: true}), want: ":1\r\n", calls: []string{"hashrelease[redisson_unlock_latch:{lock}:ab 13.5s] lock uuid:1 30s"}},
		{name: "still held", keys: []string{"lock", "redisson_lock__channel:{lock}", "redisson_unlock_latch:{lock}:ab"}, args: []string{"0", "30000", "uuid:1", "PUBLISH", "13500"},
			answer: returns(quorum.Result{HoldCount: 1}), want: ":0\r\n", calls: []string{"hashrelease[redisson_unlock_latch:{lock}:ab 13.5s] lock uuid:1 30s"}},
		{name: "not the owner", keys: []string{"lock", "redisson_lock__channel:{lock}", "redisson_unlock_latch:{lock}:ab"}, args: []string{"0", "30000", "uuid:1", "PUBLISH", "13500"},
			answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"hashrelease[redisson_unlock_latch:{lock}:ab 13.5s] lock uuid:1 30s"}},
		{name: "latch ttl not a number", keys: []string{"lock", "redisson_lock__channel:{lock}", "redisson_unlock_latch:{lock}:ab"}, args: []string{"0", "30000", "uuid:1", "PUBLISH", "x"},
			want: "-ERR value is not an integer or out of range\r\n"},
	},
	"redisson-release": {
		{name: "released", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "30000", "uuid:1"},
			answer: returns(quorum.Result{Released: true}), want: ":1\r\n", calls: []string{"hashrelease lock uuid:1 30s"}},
		{name: "still held", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "30000", "uuid:1"},
			answer: returns(quorum.Result{HoldCount: 2}), want: ":0\r\n", calls: []string{"hashrelease lock uuid:1 30s"}},
		{name: "not the owner", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "30000", "uuid:1"},
			answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"hashrelease lock uuid:1 30s"}},
	},
	"redisson-release-command": {
		{name: "released", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "30000", "uuid:1", "SPUBLISH"},
			answer: returns(quorum.Result{Released: true}), want: ":1\r\n", calls: []string{"hashrelease lock uuid:1 30s"}},
		{name: "not the owner", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "30000", "uuid:1", "PUBLISH"},
			answer: fails(quorum.ErrNotHeld), want: nullReply, calls: []string{"hashrelease lock uuid:1 30s"}},
	},
	"redisson-force-unlock": {
		{name: "deleted", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0"}, answer: returns(true), want: ":1\r\n", calls: []string{"delete lock"}},
		{name: "free", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0"}, want: ":0\r\n", calls: []string{"delete lock"}},
	},
	"redisson-force-unlock-command": {
		{name: "deleted", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "PUBLISH"}, answer: returns(true), want: ":1\r\n", calls: []string{"delete lock"}},
		{name: "free", keys: []string{"lock", "redisson_lock__channel:{lock}"}, args: []string{"0", "PUBLISH"}, want: ":0\r\n", calls: []string{"delete lock"}},
	},
	"redisson-renew": {
		{name: "renewed", keys: []string{"lock"}, args: []string{"30000", "uuid:1"}, want: ":1\r\n", calls: []string{"renewfields lock uuid:1 30s"}},
		{name: "lost", keys: []string{"lock"}, args: []string{"30000", "uuid:1"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"renewfields lock uuid:1 30s"}},
	},
	"redisson-renew-batch": {
		{name: "one", keys: []string{"a"}, args: []string{"30000", "u:1"}, want: "*1\r\n:1\r\n", calls: []string{"renewfields a u:1 30s"}},
		{name: "one undecided of several", keys: []string{"a", "b"}, args: []string{"30000", "u:1", "u:2"},
			answer: byKey(map[string]func(call) (any, error){"a": returns(nil), "b": noQuorum}),
			want:   noQuorumReply, calls: []string{"renewfields a u:1 30s", "renewfields b u:2 30s"}},
		{name: "each its own", keys: []string{"a", "b", "c"}, args: []string{"30000", "u:1", "u:2", "u:3"},
			answer: byKey(map[string]func(call) (any, error){"a": returns(nil), "b": fails(quorum.ErrNotHeld), "c": returns(nil)}),
			want:   "*3\r\n:1\r\n:0\r\n:1\r\n", calls: []string{"renewfields a u:1 30s", "renewfields b u:2 30s", "renewfields c u:3 30s"}},
		{name: "an owner missing", keys: []string{"a", "b"}, args: []string{"30000", "u:1"},
			want: "-ERR lockproxy runs Redisson's watchdog with a lease and an owner for each of its 2 keys (got 2 arguments)\r\n"},
	},
	"redisson-read-acquire":            redissonReadAcquireCases,
	"redisson-write-acquire":           redissonWriteAcquireCases,
	"redisson-read-release":            redissonReadReleaseCases(":1\r\n"),
	"redisson-read-release-free-null":  redissonReadReleaseCases(nullReply),
	"redisson-write-release":           redissonWriteReleaseCases(":1\r\n"),
	"redisson-write-release-free-null": redissonWriteReleaseCases(nullReply),
	"redisson-read-renew":              redissonReadRenewCases,
	"redisson-read-renew-batch":        redissonReadRenewBatchCases,
	"redisson-read-force-unlock":       redissonRWForceUnlockCases("0", quorum.ReadMode),
	"redisson-write-force-unlock":      redissonRWForceUnlockCases("1", quorum.WriteMode),
	"redisson-read-locked":             redissonReadLockedCases,
	// The layouts before 3.24 and the watchdogs of 3.44 to 4.3.
	"redisson-read-acquire-lease":         redissonReadAcquireCases,
	"redisson-read-release-publish":       redissonUnlatchedReadReleaseCases(nil),
	"redisson-read-release-command":       redissonUnlatchedReadReleaseCases([]string{"PUBLISH"}),
	"redisson-write-release-publish":      redissonUnlatchedWriteReleaseCases(nil),
	"redisson-write-release-command":      redissonUnlatchedWriteReleaseCases([]string{"PUBLISH"}),
	"redisson-read-force-unlock-publish":  redissonRWForceUnlockPublishCases(quorum.ReadMode),
	"redisson-write-force-unlock-publish": redissonRWForceUnlockPublishCases(quorum.WriteMode),
	"redisson-read-renew-pairs":           redissonReadRenewPairsCases,
	"redisson-read-renew-pairs-hidden":    redissonReadRenewPairsCases,
	"pexpire-any": {
		{name: "set", keys: []string{"k"}, args: []string{"5000", ""}, answer: returns(true), want: ":1\r\n", calls: []string{"expire k 5s"}},
		{name: "not set", keys: []string{"k"}, args: []string{"5000", ""}, answer: returns(false), want: ":0\r\n", calls: []string{"expire k 5s"}},
		{name: "any of several", keys: []string{"a", "b"}, args: []string{"5000", ""},
			answer: byKey(map[string]func(call) (any, error){"a": returns(false), "b": returns(true)}),
			want:   ":1\r\n", calls: []string{"expire a 5s", "expire b 5s"}},
		{name: "condition", keys: []string{"k"}, args: []string{"5000", "NX"}, want: "-ERR lockproxy does not take PEXPIRE conditions (the script passes \"NX\")\r\n"},
	},
}

// withNoQuorum adds to cases a no-quorum answer to the first one's first call.
func withNoQuorum(cases []scriptCase) []scriptCase {
	first := cases[0]
	if len(first.calls) == 0 {
		return cases // it calls nothing this Locker serves (TestResetAllOverReal)
	}
	return append(slices.Clone(cases), scriptCase{
		name: "no quorum", keys: first.keys, args: first.args, answer: noQuorum,
		want: noQuorumReply, calls: first.calls[:1],
	})
}

func evalCmd(body string, keys, args []string) []string {
	cmd := []string{"EVAL", body, fmt.Sprint(len(keys))}
	return append(append(cmd, keys...), args...)
}

// TestRealScriptsOverWire EVALs every recognised body through a Server:
// the Locker call and the reply for each outcome, in RESP2 and RESP3, and
// EVALSHA after SCRIPT LOAD.
func TestRealScriptsOverWire(t *testing.T) {
	stopClock(t)
	ts := startServer(t, Config{Fencing: true}) // RFencedLock's are served with fencing on only
	for _, kind := range scriptKinds {
		if len(kindCases[kind.name]) == 0 {
			t.Errorf("kind %s has no cases", kind.name)
		}
	}
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		t.Run(s.file, func(t *testing.T) {
			body := string(readScript(t, s.file))
			var cases []wireCase
			for _, c := range withNoQuorum(kindCases[s.kind]) {
				cases = append(cases,
					wireCase{name: c.name, cmd: evalCmd(body, c.keys, c.args), answer: c.answer, want: c.want, calls: c.calls},
					wireCase{name: c.name + " RESP3", setup: [][]string{{"HELLO", "3"}}, cmd: evalCmd(body, c.keys, c.args),
						answer: c.answer, want: strings.ReplaceAll(c.want, nullReply, "_\r\n"), calls: c.calls})
			}
			first := kindCases[s.kind][0]
			cases = append(cases, wireCase{
				name: "evalsha after load", setup: [][]string{{"SCRIPT", "LOAD", body}},
				cmd:    append([]string{"EVALSHA", s.sha}, evalCmd(body, first.keys, first.args)[2:]...),
				answer: first.answer, want: first.want, calls: first.calls,
			})
			runWireCases(t, ts, cases)
		})
	}
}

// variants rewrites a script the ways libraries and users do without
// changing what it does: quotes, line endings and indentation, the case of
// command names, comments.
func variants(body string) map[string]string {
	v := map[string]string{
		"crlf and reindented":  strings.ReplaceAll(strings.ReplaceAll(body, "\t", "    "), "\n", "\r\n  "),
		"comment first":        "-- lockproxy test\n" + body,
		"command case":         swapCommandCase(body),
		"spaces around parens": strings.NewReplacer("(", " ( ", ")", " ) ", ",", " , ").Replace(body),
	}
	switch {
	case !strings.Contains(body, `'`):
		v["single quotes"] = strings.ReplaceAll(body, `"`, `'`)
	case !strings.Contains(body, `"`):
		v["double quotes"] = strings.ReplaceAll(body, `'`, `"`)
	}
	if !strings.Contains(body, "--") {
		v["one line"] = strings.Join(strings.Fields(body), " ")
	}
	return v
}

// commandName matches the command named in redis.call or redis.pcall
// (Lua reads redis.call itself only in lower case).
var commandName = regexp.MustCompile(`(redis\.p?call\(\s*["'])([A-Za-z]+)`)

func swapCommandCase(body string) string {
	return commandName.ReplaceAllStringFunc(body, func(call string) string {
		m := commandName.FindStringSubmatch(call)
		return m[1] + swapCase(m[2])
	})
}

func swapCase(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsUpper(r) {
			return unicode.ToLower(r)
		}
		return unicode.ToUpper(r)
	}, s)
}

func TestRealScriptVariants(t *testing.T) {
	stopClock(t)
	ts := startServer(t, Config{Fencing: true})
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		t.Run(s.file, func(t *testing.T) {
			body := string(readScript(t, s.file))
			first := kindCases[s.kind][0]
			var cases []wireCase
			for name, v := range variants(body) {
				if v == body {
					continue
				}
				if exp, got := s.kind, kindName(classify([]byte(v))); exp != got {
					t.Errorf("%s: want %s, got %s; variant:\n%s", name, exp, got, v)
					continue
				}
				cases = append(cases, wireCase{name: name, cmd: evalCmd(v, first.keys, first.args), answer: first.answer, want: first.want, calls: first.calls})
			}
			runWireCases(t, ts, cases)
		})
	}
}

// mutations change what a script does by one token or one command.
var mutations = []struct{ name, old, new string }{
	{"equal becomes not equal", "==", "~="},
	{"not equal becomes equal", "~=", "=="},
	{"other token", "ARGV[1]", "ARGV[4]"},
	{"other key", "KEYS[1]", "KEYS[2]"},
	{"loop over ARGV", "ipairs(KEYS)", "ipairs(ARGV)"},
	{"return 0 becomes 2", "return 0", "return 2"},
	{"return 1 becomes 2", "return 1", "return 2"},
	{"return -1 becomes -2", "return -1", "return -2"},
	{"return -3 becomes -4", "return -3", "return -4"},
	{"return true becomes 2", "return true", "return 2"},
	{"return false becomes 2", "return false", "return 2"},
	{"count becomes 1", "return count", "return 1"},
	{"#KEYS becomes 1", "return #KEYS", "return 1"},
	{"NX becomes XX", "NX", "XX"},
	{"yes becomes YES", `"yes"`, `"YES"`},
	{"0 becomes 1", `"0"`, `"1"`},
	{"OK becomes ok", `("OK")`, `("ok")`},
	{"plus becomes minus", "+ expiration", "- expiration"},
}

// commandSwaps replace a script's first call of the command with INCR.
var commandSwaps = []string{"del", "unlink", "pexpire", "expire", "set", "get", "exists", "pttl", "ttl", "getrange", "msetnx", "mget", "select"}

func mutants(body string) map[string]string {
	m := map[string]string{"extra write": "redis.call(\"set\", \"lockproxy:x\", \"1\")\n" + body}
	for _, mu := range mutations {
		if strings.Contains(body, mu.old) {
			m[mu.name] = strings.Replace(body, mu.old, mu.new, 1)
		}
	}
	for _, c := range commandSwaps {
		re := regexp.MustCompile(`(?i)(redis\.p?call\(\s*)["']` + c + `["']`)
		if loc := re.FindStringSubmatchIndex(body); loc != nil {
			m[c+" becomes incr"] = body[:loc[3]] + `"incr"` + body[loc[1]:]
		}
	}
	return m
}

// TestRealScriptMutants checks that a script one token or one command away
// from a recognised one is refused, naming its SHA1.
func TestRealScriptMutants(t *testing.T) {
	stopClock(t)
	ts := startServer(t, Config{})
	for _, s := range realScripts {
		if s.kind == "" {
			continue
		}
		t.Run(s.file, func(t *testing.T) {
			body := string(readScript(t, s.file))
			first := kindCases[s.kind][0]
			var cases []wireCase
			for name, m := range mutants(body) {
				if got := classify([]byte(m)); got != nil {
					t.Errorf("%s: recognised as %s; mutant:\n%s", name, got.name, m)
					continue
				}
				cases = append(cases, wireCase{name: name, cmd: evalCmd(m, first.keys, first.args), want: refusal(m)})
			}
			runWireCases(t, ts, cases)
		})
	}
}

func refusal(body string) string { return refusalOf(sha1Hex([]byte(body))) }

// refusalOf is the refusal of a script by its SHA1: Redisson's other lock
// objects are named.
func refusalOf(sha string) string {
	if obj := redissonRefused[sha]; obj != nil {
		return "-ERR lockproxy does not run this script (sha1 " + sha + "): " + obj.name + " is not served: " + obj.why + "\r\n"
	}
	return "-ERR lockproxy does not run this script (sha1 " + sha + "): only recognised lock scripts are served\r\n"
}

// TestUnsupportedScripts checks that the scripts lockproxy cannot serve
// are refused by EVAL and SCRIPT LOAD with an error naming their SHA1,
// and that EVALSHA then finds nothing.
func TestUnsupportedScripts(t *testing.T) {
	ts := startServer(t, Config{})
	for _, s := range realScripts {
		if s.kind != "" {
			continue
		}
		t.Run(s.file, func(t *testing.T) {
			body := string(readScript(t, s.file))
			runWireCases(t, ts, []wireCase{
				{name: "eval", cmd: evalCmd(body, []string{"k", "k2", "k3"}, []string{"0", "30000", "id", "PUBLISH", "1000"}), want: refusal(body)},
				{name: "script load", cmd: []string{"SCRIPT", "LOAD", body}, want: refusal(body)},
				{name: "evalsha", cmd: []string{"EVALSHA", s.sha, "1", "k", "id"}, want: noScript},
			})
		})
	}
}

// TestScriptErrorsAreNotSwallowed checks that an error other than the
// sentinels reaches the client as an error (never as a "not held" reply).
func TestScriptErrorsAreNotSwallowed(t *testing.T) {
	stopClock(t)
	ts := startServer(t, Config{Fencing: true})
	boom := errors.New("boom")
	var cases []wireCase
	for _, s := range realScripts {
		if s.kind == "" || slices.ContainsFunc(cases, func(c wireCase) bool { return c.name == s.kind }) {
			continue
		}
		first := kindCases[s.kind][0]
		if len(first.calls) == 0 {
			continue // it calls nothing this Locker serves
		}
		cases = append(cases, wireCase{name: s.kind, cmd: evalCmd(string(readScript(t, s.file)), first.keys, first.args),
			answer: fails(boom), want: "-ERR internal error\r\n", calls: first.calls[:1]})
	}
	runWireCases(t, ts, cases)
}

// TestRedissonRefusedHaveBodies checks that every script refused by name
// is a body in testdata that the table refuses too.
func TestRedissonRefusedHaveBodies(t *testing.T) {
	refused := map[string]bool{}
	for _, s := range realScripts {
		if s.reason != "" {
			refused[s.sha] = true
		}
	}
	for sha, obj := range redissonRefused {
		if !refused[sha] {
			t.Errorf("%s (%s) is refused by name, but no refused body in testdata/scripts has that SHA1", sha, obj.name)
		}
	}
}

// TestRedissonFencedLockNeedsFencing checks that RFencedLock's scripts are
// refused, saying why, by a proxy without fencing, and reach no Locker.
func TestRedissonFencedLockNeedsFencing(t *testing.T) {
	ts := startServer(t, Config{})
	var cases []wireCase
	for _, file := range []string{"redisson-4.7.0-fencedlock-acquire.lua", "redisson-4.7.0-fencedlock-acquire-token.lua"} {
		cases = append(cases, wireCase{name: file, cmd: evalCmd(string(readScript(t, file)), []string{"lock", "redisson_lock_token:{lock}"}, []string{"30000", "uuid:1"}),
			want: "-ERR " + redissonFencing + "\r\n"})
	}
	runWireCases(t, ts, cases)
}

// stopped is the clock's time while stopClock holds it.
var stopped = time.UnixMilli(1_800_000_000_000)

// stopClock stops the clock that Unix times (PXAT, PEXPIREAT) are read
// against, until t ends, so that the TTLs they give are exact.
func stopClock(t *testing.T) {
	now = func() time.Time { return stopped }
	t.Cleanup(func() { now = time.Now })
}

// stoppedAt is the Unix time in ms that is ms after the stopped clock.
func stoppedAt(ms int64) string { return strconv.FormatInt(stopped.UnixMilli()+ms, 10) }

// redissonUnlatchedReadReleaseCases are the read unlock's before 3.24,
// with no latch, and a free lock's 1; publish is the command argument
// from 3.22.
func redissonUnlatchedReadReleaseCases(publish []string) []scriptCase {
	keys := rwReadRelease[:4]
	args := append([]string{"0", "u:1"}, publish...)
	call := []string{"readrelease rw,{rw} u:1"}
	return []scriptCase{
		{name: "released, the lock gone", keys: keys, args: args,
			answer: returns(quorum.Result{Released: true, Emptied: true}), want: ":1\r\n", calls: call},
		{name: "released, other readers left", keys: keys, args: args, answer: returns(quorum.Result{Released: true}), want: ":0\r\n", calls: call},
		{name: "still held", keys: keys, args: args, answer: returns(quorum.Result{HoldCount: 1}), want: ":0\r\n", calls: call},
		{name: "not the owner", keys: keys, args: args, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: call},
		{name: "free", keys: keys, args: args, answer: fails(quorum.ErrAbsent), want: ":1\r\n", calls: call},
		{name: "timeout prefix of another reader", keys: []string{"rw", "redisson_rwlock:{rw}", "{rw}:u:2:rwlock_timeout", "{rw}"}, args: args,
			want: "-ERR lockproxy runs Redisson's read unlock with a timeout prefix of the key prefix \"{rw}\", then :<reader>:rwlock_timeout, the reader being \"u:1\" (got \"{rw}:u:2:rwlock_timeout\")\r\n"},
	}
}

// redissonUnlatchedWriteReleaseCases are the write unlock's before 3.24,
// as above.
func redissonUnlatchedWriteReleaseCases(publish []string) []scriptCase {
	keys := rwWriteRelease[:2]
	args := append([]string{"1", "30000", "u:1:write"}, publish...)
	call := []string{"writerelease rw u:1 30s"}
	return []scriptCase{
		{name: "released", keys: keys, args: args, answer: returns(quorum.Result{Released: true, Emptied: true}), want: ":1\r\n", calls: call},
		{name: "downgraded", keys: keys, args: args, answer: returns(quorum.Result{Released: true}), want: ":1\r\n", calls: call},
		{name: "still held", keys: keys, args: args, answer: returns(quorum.Result{HoldCount: 1}), want: ":0\r\n", calls: call},
		{name: "not the owner", keys: keys, args: args, answer: fails(quorum.ErrNotHeld), want: nullReply, calls: call},
		{name: "free", keys: keys, args: args, answer: fails(quorum.ErrAbsent), want: ":1\r\n", calls: call},
		{name: "reader field", keys: keys, args: append([]string{"1", "30000", "u:1"}, publish...),
			want: "-ERR lockproxy runs Redisson's write lock with a writer field of <owner>:write (got \"u:1\")\r\n"},
	}
}

// redissonRWForceUnlockPublishCases are forceUnlock's to 3.21.3, whose
// only argument is the message.
func redissonRWForceUnlockPublishCases(mode string) []scriptCase {
	msg := map[string]string{quorum.ReadMode: "0", quorum.WriteMode: "1"}[mode]
	call := []string{"rwdelete/" + mode + " rw"}
	return []scriptCase{
		{name: "deleted", keys: rwForce, args: []string{msg}, answer: returns(true), want: ":1\r\n", calls: call},
		{name: "not in that mode", keys: rwForce, args: []string{msg}, answer: returns(false), want: ":0\r\n", calls: call},
	}
}

// redissonReadRenewPairsCases are the read watchdog's from 3.44.0 to
// 4.3.1: one reader per lock.
var redissonReadRenewPairsCases = []scriptCase{
	{name: "one", keys: []string{"rw", "{rw}"}, args: []string{"30000", "u:1"}, want: "*1\r\n:1\r\n", calls: []string{"renewreads rw,{rw} u:1 30s"}},
	{name: "each lock on its reader", keys: []string{"a", "{a}", "b", "{b}"}, args: []string{"30000", "u:1", "u:2"},
		answer: byHold(map[string]func(call) (any, error){"a,{a} u:1": fails(quorum.ErrNotHeld)}),
		want:   "*2\r\n:0\r\n:1\r\n", calls: []string{"renewreads a,{a} u:1 30s", "renewreads b,{b} u:2 30s"}},
	{name: "a lock undecided", keys: []string{"a", "{a}", "b", "{b}"}, args: []string{"30000", "u:1", "u:1"},
		answer: byHold(map[string]func(call) (any, error){"b,{b} u:1": noQuorum}),
		want:   noQuorumReply, calls: []string{"renewreads a,{a} u:1 30s", "renewreads b,{b} u:1 30s"}},
	{name: "a reader short", keys: []string{"a", "{a}", "b", "{b}"}, args: []string{"30000", "u:1"},
		want: "-ERR lockproxy runs Redisson's read lock watchdog with pairs of keys, a lock and its key prefix, and a lease and a reader for each pair (got 4 keys, 2 arguments)\r\n"},
	{name: "odd keys", keys: []string{"a", "{a}", "b"}, args: []string{"30000", "u:1"},
		want: "-ERR lockproxy runs Redisson's read lock watchdog with pairs of keys, a lock and its key prefix, and a lease and a reader for each pair (got 3 keys, 2 arguments)\r\n"},
	{name: "lease zero", keys: []string{"a", "{a}"}, args: []string{"0", "u:1"}, want: "-ERR invalid expire time in 'pexpire' command\r\n"},
}
