"""redis-py's redis.asyncio.lock.Lock through lockproxy, unchanged: the
checks of redispy_lock.py, awaited on one event loop.

Follows the compatibility contract of test/compat_test.go:

    redispy_asyncio_lock.py contend ADDR LOGFILE ROUNDS WORKER
    redispy_asyncio_lock.py scenario ADDR
    redispy_asyncio_lock.py suite ADDR LOGFILE ROUNDS WORKERS   (workers as tasks on one loop)

Run it with the Python of a virtual environment of requirements/ (redis-py
5 and later). REDISPY_PROTOCOL=3 connects with protocol=3 (RESP3, HELLO 3);
unset or 2, RESP2.
"""

import asyncio
import os
import sys
import time

import redis
import redis.asyncio
from redis.exceptions import LockNotOwnedError

# No __pycache__ beside the programs when importing the shared checks.
sys.dont_write_bytecode = True
from checks import AsyncChecks, eq, expect, raises_async, suite, within  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"


def connect(addr):
    host, port = addr.rsplit(":", 1)
    protocol = int(os.environ.get("REDISPY_PROTOCOL", "2"))
    return redis.asyncio.Redis(host=host, port=int(port), socket_timeout=10, protocol=protocol)


async def close(r):
    # aclose() arrived in redis-py 5.0.1; close() is its deprecated name.
    await (r.aclose() if hasattr(r, "aclose") else r.close())


async def contend(addr, logfile, rounds, worker):
    r = connect(addr)
    log = os.open(logfile, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    for n in range(rounds):
        lock = r.lock(CONTENDED, timeout=10, sleep=0.005, blocking=True, blocking_timeout=60)
        if not await lock.acquire():
            sys.exit(f"worker {worker} round {n}: not acquired within 60 s")
        os.write(log, f"enter {worker}-{n}\n".encode())
        await asyncio.sleep(0.002)
        os.write(log, f"exit {worker}-{n}\n".encode())
        try:
            await lock.release()
        except LockNotOwnedError as e:
            sys.exit(f"worker {worker} round {n}: release as owner refused: {e!r}")
    os.close(log)
    await close(r)


async def scenario(addr):
    r = connect(addr)
    print(f"redis-py {redis.__version__} asyncio, protocol {os.environ.get('REDISPY_PROTOCOL', 'default')}", flush=True)
    c = AsyncChecks()
    owner = r.lock(SCENARIO, timeout=10, sleep=0.02)
    other = r.lock(SCENARIO, timeout=10, sleep=0.02)

    async def pttl_within(lo, hi):
        return within(await r.pttl(SCENARIO), lo, hi)

    async def owner_acquire():
        return expect(await owner.acquire(blocking=False), True)

    await c.check("acquire", owner_acquire)
    await c.check("owned() by the owner", lambda: eq(owner.owned(), True))
    await c.check("locked()", lambda: eq(owner.locked(), True))
    await c.check("PTTL about the lock's timeout", lambda: pttl_within(9000, 10000))

    async def blocked():
        start = time.monotonic()
        got = await other.acquire(blocking=True, blocking_timeout=0.3)
        waited = time.monotonic() - start
        if got:
            return "acquired a held lock"
        return within(round(waited, 2), 0.2, 5)

    await c.check("blocking acquire by a second Lock times out while held", blocked)
    await c.check("non-blocking acquire by a second Lock while held", lambda: eq(other.acquire(blocking=False), False))

    # A second owner is simulated the way lock.py keeps ownership: its token.
    other.local.token = b"other"
    await c.check("owned() with another token", lambda: eq(other.owned(), False))
    await c.check("locked() seen by another token", lambda: eq(other.locked(), True))
    await c.check("extend with another token raises LockNotOwnedError", lambda: raises_async(LockNotOwnedError, lambda: other.extend(5)))
    await c.check("reacquire with another token raises LockNotOwnedError", lambda: raises_async(LockNotOwnedError, other.reacquire))
    other.local.token = b"other"
    await c.check("release with another token raises LockNotOwnedError", lambda: raises_async(LockNotOwnedError, other.release))
    await c.check("owner still owns it after the refused release", lambda: eq(owner.owned(), True))

    await c.check("extend(5) adds to the TTL", lambda: eq(owner.extend(5), True))
    await c.check("PTTL after extend(5)", lambda: pttl_within(13000, 15000))
    await c.check("extend(3, replace_ttl=True)", lambda: eq(owner.extend(3, replace_ttl=True), True))
    await c.check("PTTL after extend(3, replace_ttl=True)", lambda: pttl_within(2000, 3000))
    await c.check("reacquire()", lambda: eq(owner.reacquire(), True))
    await c.check("PTTL after reacquire()", lambda: pttl_within(9000, 10000))
    await c.check("owned() after extend and reacquire", lambda: eq(owner.owned(), True))

    async def waits_for_release():
        async def release_later():
            await asyncio.sleep(0.3)
            await owner.release()

        releaser = asyncio.create_task(release_later())
        start = time.monotonic()
        try:
            got = await other.acquire(blocking=True, blocking_timeout=5)
        finally:
            await releaser
        waited = time.monotonic() - start
        if not got:
            return "not acquired within 5 s of the owner's release"
        return within(round(waited, 2), 0.25, 5)

    await c.check("blocking acquire gets the lock once the owner releases it", waits_for_release)
    await c.check("owned() by the new owner", lambda: eq(other.owned(), True))
    await c.check("owned() by the former owner", lambda: eq(owner.owned(), False))
    await c.check("release by the new owner", lambda: eq(other.release(), None))
    await c.check("not locked() after release", lambda: eq(other.locked(), False))
    await c.check("acquire again after release", lambda: eq(owner.acquire(blocking=False), True))
    await c.check("release again", lambda: eq(owner.release(), None))

    short = r.lock(SCENARIO, timeout=0.3)
    await c.check("acquire with a 0.3 s timeout", lambda: eq(short.acquire(blocking=False), True))
    await asyncio.sleep(0.6)
    await c.check("not locked() once expired", lambda: eq(short.locked(), False))
    await c.check("owned() false once expired", lambda: eq(short.owned(), False))
    await c.check("extend after expiry raises LockNotOwnedError", lambda: raises_async(LockNotOwnedError, lambda: short.extend(1)))
    await c.check("release after expiry raises LockNotOwnedError", lambda: raises_async(LockNotOwnedError, short.release))
    await c.check("free at the end", lambda: eq(r.get(SCENARIO), None))
    await close(r)

    if c.failed:
        sys.exit(f"{len(c.failed)} checks failed: {', '.join(c.failed)}")



def main(argv):
    if len(argv) == 6 and argv[1] == "contend":
        asyncio.run(contend(argv[2], argv[3], int(argv[4]), argv[5]))
    elif len(argv) == 3 and argv[1] == "scenario":
        asyncio.run(scenario(argv[2]))
    elif len(argv) == 6 and argv[1] == "suite":
        suite(argv[2:], contend, scenario)
    else:
        sys.exit(f"usage: {argv[0]} contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS")


if __name__ == "__main__":
    main(sys.argv)
