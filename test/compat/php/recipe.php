<?php
// The redis.io lock recipe with phpredis (Debian php-redis) through
// lockproxy: SET NX PX to acquire, EVAL compare-and-delete to release, EVAL
// compare-and-pexpire to extend.
//
// Follows the compatibility contract of test/compat_test.go:
//
//   php recipe.php contend ADDR LOGFILE ROUNDS WORKER
//   php recipe.php scenario ADDR
//   php recipe.php suite ADDR LOGFILE ROUNDS WORKERS

const CONTENDED = 'compat:contended';
const SCENARIO = 'compat:scenario';

const RELEASE = <<<'LUA'
if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end
LUA;

const EXTEND = <<<'LUA'
if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("pexpire",KEYS[1],ARGV[2])
else
    return 0
end
LUA;

function fail(string $msg): never
{
    fwrite(STDERR, $msg . "\n");
    exit(1);
}

function connect(string $addr): Redis
{
    [$host, $port] = explode(':', $addr, 2);
    $r = new Redis();
    if (!$r->connect($host, (int)$port, 10.0)) {
        fail("cannot connect to $addr");
    }
    $r->setOption(Redis::OPT_READ_TIMEOUT, 10.0);
    return $r;
}

// phpredis answers false both for a nil reply and for an error reply; the
// error reply is kept in getLastError(), so each call clears it first and
// every failure is reported with it.
function call(Redis $r, callable $fn)
{
    $r->clearLastError();
    $got = $fn($r);
    $err = $r->getLastError();
    if ($err !== null) {
        return "error reply: $err";
    }
    return $got;
}

function acquire(Redis $r, string $key, string $token, int $ttl)
{
    return call($r, fn ($r) => $r->set($key, $token, ['nx', 'px' => $ttl]));
}

function release(Redis $r, string $key, string $token)
{
    return call($r, fn ($r) => $r->eval(RELEASE, [$key, $token], 1));
}

function extend(Redis $r, string $key, string $token, int $ttl)
{
    return call($r, fn ($r) => $r->eval(EXTEND, [$key, $token, $ttl], 1));
}

function contend(string $addr, string $log, int $rounds, string $worker): void
{
    $r = connect($addr);
    for ($n = 0; $n < $rounds; $n++) {
        $token = bin2hex(random_bytes(16));
        $deadline = hrtime(true) + 60e9;
        while (($got = acquire($r, CONTENDED, $token, 10000)) !== true) {
            if ($got !== false) {
                fail("worker $worker round $n: acquire: " . var_export($got, true));
            }
            if (hrtime(true) > $deadline) {
                fail("worker $worker round $n: not acquired within 60 s");
            }
            usleep(random_int(2000, 5000));
        }
        file_put_contents($log, "enter $worker-$n\n", FILE_APPEND | LOCK_EX);
        usleep(2000);
        file_put_contents($log, "exit $worker-$n\n", FILE_APPEND | LOCK_EX);
        $got = release($r, CONTENDED, $token);
        if ($got !== 1) {
            fail("worker $worker round $n: release as owner returned " . var_export($got, true));
        }
    }
}

function scenario(string $addr): void
{
    $r = connect($addr);
    $failed = [];
    $check = function (string $name, $got, $want) use (&$failed) {
        if ($got === $want) {
            echo "ok   $name\n";
        } else {
            echo "FAIL $name: got " . var_export($got, true) . ", want " . var_export($want, true) . "\n";
            $failed[] = $name;
        }
    };

    $owner = bin2hex(random_bytes(16));
    $other = bin2hex(random_bytes(16));
    $check('acquire', acquire($r, SCENARIO, $owner, 10000), true);
    $check('acquire with another token while held', acquire($r, SCENARIO, $other, 10000), false);
    $check('extend as owner', extend($r, SCENARIO, $owner, 20000), 1);
    $pttl = call($r, fn ($r) => $r->pttl(SCENARIO));
    $check('PTTL after extend above the first TTL', is_int($pttl) && $pttl > 10000 && $pttl <= 20000, true);
    $check('extend with another token', extend($r, SCENARIO, $other, 20000), 0);
    $check('release with another token', release($r, SCENARIO, $other), 0);
    $check('still held by the owner', call($r, fn ($r) => $r->get(SCENARIO)), $owner);
    $check('release as owner', release($r, SCENARIO, $owner), 1);
    $check('free after release', call($r, fn ($r) => $r->get(SCENARIO)), false);
    $check('release again as owner', release($r, SCENARIO, $owner), 0);
    $check('acquire again', acquire($r, SCENARIO, $other, 10000), true);
    // The same release by its SHA1, as apps that cache their scripts send it.
    $check('SCRIPT LOAD of the release script', call($r, fn ($r) => $r->script('load', RELEASE)), sha1(RELEASE));
    $check('release the new holding by EVALSHA', call($r, fn ($r) => $r->evalSha(sha1(RELEASE), [SCENARIO, $other], 1)), 1);
    $check('free at the end', call($r, fn ($r) => $r->get(SCENARIO)), false);

    if ($failed) {
        fail(count($failed) . ' checks failed: ' . implode(', ', $failed));
    }
}

// The workers are this program's contend, each in a php process of its own:
// PHP has no threads, and its pcntl_fork is not in every build, where a
// process costs about 20 ms to start. The scenario runs whatever the workers
// did, so that one run reports both.
function suite(string $addrs, string $log, int $rounds, int $workers): void
{
    $addrs = explode(',', $addrs);
    $procs = [];
    for ($w = 0; $w < $workers; $w++) {
        $cmd = [PHP_BINARY, __FILE__, 'contend', $addrs[$w % count($addrs)], $log, (string)$rounds, (string)$w];
        $proc = proc_open($cmd, [1 => STDOUT, 2 => STDERR], $pipes);
        if ($proc === false) {
            fail("worker $w: cannot start " . implode(' ', $cmd));
        }
        $procs[$w] = $proc;
    }
    $failed = [];
    foreach ($procs as $w => $proc) {
        if (proc_close($proc) !== 0) {
            fwrite(STDERR, "FAIL worker $w\n");
            $failed[] = $w;
        }
    }
    scenario($addrs[0]);
    if ($failed) {
        fail(count($failed) . " of $workers workers failed: " . implode(', ', $failed));
    }
}

$args = array_slice($argv, 1);
if (count($args) === 5 && $args[0] === 'contend') {
    contend($args[1], $args[2], (int)$args[3], $args[4]);
} elseif (count($args) === 2 && $args[0] === 'scenario') {
    scenario($args[1]);
} elseif (count($args) === 5 && $args[0] === 'suite') {
    suite($args[1], $args[2], (int)$args[3], (int)$args[4]);
} else {
    fail('usage: recipe.php contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS');
}
