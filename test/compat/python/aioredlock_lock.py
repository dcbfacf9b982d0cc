"""aioredlock's Aioredlock through lockproxy, unchanged, with the proxy as its
one instance: aioredlock's own Redlock over one instance becomes lockproxy's
Redlock over the backends.

Follows the compatibility contract of test/compat_test.go:

    aioredlock_lock.py contend ADDR LOGFILE ROUNDS WORKER
    aioredlock_lock.py scenario ADDR
    aioredlock_lock.py suite ADDR LOGFILE ROUNDS WORKERS   (workers as tasks on one loop)

Run it with the Python of the virtual environment of
requirements/aioredlock.txt: aioredlock 0.7.3 needs aioredis 1.x (< 2.0).
"""

import asyncio
import os
import sys
import time
from importlib.metadata import version

import aioredis
from aioredlock import Aioredlock, Lock, LockError

# No __pycache__ beside the programs when importing the shared checks.
sys.dont_write_bytecode = True
from checks import AsyncChecks, eq, expect, raises_async, suite, within  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"


def manager(addr, **options):
    host, port = addr.rsplit(":", 1)
    return Aioredlock([{"host": host, "port": int(port)}], **options)


async def contend(addr, logfile, rounds, worker):
    # lock() tries retry_count times, retry_delay_min to _max seconds
    # apart, then raises LockError; short delays keep 100 rounds quick.
    m = manager(addr, retry_delay_min=0.002, retry_delay_max=0.01)
    log = os.open(logfile, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    for n in range(rounds):
        deadline = time.monotonic() + 60
        while True:
            try:
                lock = await m.lock(CONTENDED, lock_timeout=10)
                break
            except LockError:
                if time.monotonic() > deadline:
                    sys.exit(f"worker {worker} round {n}: not acquired within 60 s")
        os.write(log, f"enter {worker}-{n}\n".encode())
        await asyncio.sleep(0.002)
        os.write(log, f"exit {worker}-{n}\n".encode())
        try:
            await m.unlock(lock)
        except LockError as e:
            sys.exit(f"worker {worker} round {n}: release as owner refused: {e!r}")
    os.close(log)
    await m.destroy()


async def scenario(addr):
    print(f"aioredlock {version('aioredlock')}, aioredis {aioredis.__version__}", flush=True)
    host, port = addr.rsplit(":", 1)
    r = await aioredis.create_redis((host, int(port)))
    m = manager(addr, retry_count=2, retry_delay_min=0.01, retry_delay_max=0.02)
    other = manager(addr, retry_count=2, retry_delay_min=0.01, retry_delay_max=0.02)
    c = AsyncChecks()
    held = {}

    async def pttl_within(lo, hi):
        return within(await r.pttl(SCENARIO), lo, hi)

    async def acquire():
        held["lock"] = await m.lock(SCENARIO, lock_timeout=10)
        return expect(held["lock"].valid, True)

    await c.check("lock(lock_timeout=10)", acquire)
    lock = held.get("lock") or Lock(m, SCENARIO, "never-acquired", 10)
    await c.check("is_locked()", lambda: eq(m.is_locked(SCENARIO), True))
    await c.check("PTTL about the lock_timeout", lambda: pttl_within(9000, 10000))
    await c.check("get_lock() by the owner's id: its TTL in seconds", lambda: eq(_timeout(m.get_lock(SCENARIO, lock.id)), 10))
    await c.check("lock() by a second manager raises LockError", lambda: raises_async(LockError, lambda: other.lock(SCENARIO, lock_timeout=10)))
    intruder = Lock(other, SCENARIO, "other", 10, valid=True)
    await c.check("get_lock() by another id raises LockError", lambda: raises_async(LockError, lambda: other.get_lock(SCENARIO, "other")))
    await c.check("extend by another id raises LockError", lambda: raises_async(LockError, lambda: other.extend(intruder)))
    intruder.valid = True
    await c.check("unlock by another id raises LockError", lambda: raises_async(LockError, lambda: other.unlock(intruder)))
    await c.check("owner still holds it after the refused unlock", lambda: eq(r.get(SCENARIO), lock.id.encode()))

    await c.check("extend(lock, lock_timeout=20)", lambda: eq(m.extend(lock, lock_timeout=20), None))
    await c.check("PTTL after extend to 20 s", lambda: pttl_within(19000, 20000))
    await c.check("Lock.extend(): back to its lock_timeout", lambda: eq(lock.extend(), None))
    await c.check("PTTL after Lock.extend()", lambda: pttl_within(9000, 10000))
    await c.check("Lock.release()", lambda: eq(lock.release(), None))
    await c.check("valid is False after release", lambda: _value(expect(lock.valid, False)))
    await c.check("not is_locked() after release", lambda: eq(m.is_locked(SCENARIO), False))
    # aioredlock's unset script answers OK for an absent key.
    gone = Lock(m, SCENARIO, "gone", 10, valid=True)
    await c.check("unlock of a free key is not an error", lambda: eq(m.unlock(gone), None))

    async def context_manager():
        async with await m.lock(SCENARIO, lock_timeout=10) as inside:
            if not await m.is_locked(inside):
                return "not locked inside the async with block"
        return expect(await m.is_locked(SCENARIO), False)

    await c.check("async with lock: held inside, free after", context_manager)

    # Without lock_timeout a watchdog extends the lock every 0.6 of
    # internal_lock_timeout: it outlives its first lease.
    watched = manager(addr, internal_lock_timeout=1, retry_delay_min=0.01, retry_delay_max=0.02)

    async def watchdog():
        wlock = await watched.lock(SCENARIO)
        await asyncio.sleep(1.5)
        alive = await r.pttl(SCENARIO)
        await watched.unlock(wlock)
        if not 0 < alive <= 1000:
            return f"PTTL {alive} after 1.5 s of a 1 s lease"
        return expect(await r.get(SCENARIO), None)

    await c.check("the watchdog extends a lock past its first lease", watchdog)

    async def expired():
        short = await m.lock(SCENARIO, lock_timeout=0.3)
        await asyncio.sleep(0.6)
        if await m.is_locked(SCENARIO):
            return "still locked after its 0.3 s lease"
        # aioredlock's set script takes an absent key: extend re-takes it.
        await m.extend(short, lock_timeout=10)
        got = await r.get(SCENARIO)
        await m.unlock(short)
        return expect(got, short.id.encode())

    await c.check("expires after lock_timeout; extend then takes the free key again", expired)
    await c.check("free at the end", lambda: eq(r.get(SCENARIO), None))

    await m.destroy()
    await other.destroy()
    await watched.destroy()
    r.close()
    await r.wait_closed()
    if c.failed:
        sys.exit(f"{len(c.failed)} checks failed: {', '.join(c.failed)}")


async def _timeout(lock_awaitable):
    return (await lock_awaitable).lock_timeout


async def _value(v):
    return v


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
