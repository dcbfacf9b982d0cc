"""python-redis-lock's Lock through lockproxy, unchanged: its acquire waits in
BLPOP lock-signal:<name>, which lockproxy answers when lock:<name> is
released through any proxy.

Follows the compatibility contract of test/compat_test.go:

    pyredislock.py contend ADDR LOGFILE ROUNDS WORKER
    pyredislock.py scenario ADDR
    pyredislock.py suite ADDR LOGFILE ROUNDS WORKERS

and, for test/pyredislock_test.go:

    pyredislock.py handoff ADDR_A ADDR_B   a waiter blocked on B, woken by a release on A
    pyredislock.py noexpire ADDR           what Lock(expire=None).acquire() gets
    pyredislock.py expire ADDR SECONDS     Lock(expire=SECONDS, auto_renewal=True): acquire, extend, release
    pyredislock.py hold LIB ADDR SECONDS   a lock without a TTL held SECONDS, then released
    pyredislock.py hold LIB ADDR forever   ... held until the process is killed

where LIB is redis-py (Lock(timeout=None)) or python-redis-lock
(Lock(expire=None)): both send SET NX without a TTL, which lockproxy
serves as a session-bound lock.

Run it with the Python of the virtual environment of
requirements/pyredislock.txt. REDISPY_PROTOCOL=3 connects with RESP3.
PYREDISLOCK_EXPIRE=none makes contend and scenario take their locks with
expire=None (SET NX without a TTL: a session-bound lock through lockproxy,
one that never expires on one Redis).
"""

import os
import sys
import threading
import time
from importlib.metadata import version

import redis
import redis_lock

# No __pycache__ beside the programs when importing the shared checks.
sys.dont_write_bytecode = True
from checks import Checks, expect, raises, suite, within  # noqa: E402
from redispy_recipe import connect as recipe_connect  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"
NO_EXPIRE = os.environ.get("PYREDISLOCK_EXPIRE") == "none"


def connect(addr):
    # No socket timeout: acquire blocks in BLPOP for up to the lock's expire.
    return recipe_connect(addr, socket_timeout=None)


def contend(addr, logfile, rounds, worker):
    r = connect(addr)
    log = os.open(logfile, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    for n in range(rounds):
        lock = redis_lock.Lock(r, CONTENDED, expire=None if NO_EXPIRE else 10)
        # Blocking, without a timeout: SET NX, and BLPOP while it is held.
        if not lock.acquire(blocking=True):
            sys.exit(f"worker {worker} round {n}: blocking acquire returned False")
        os.write(log, f"enter {worker}-{n}\n".encode())
        time.sleep(0.002)
        os.write(log, f"exit {worker}-{n}\n".encode())
        try:
            lock.release()
        except redis_lock.NotAcquired as e:
            sys.exit(f"worker {worker} round {n}: release as owner refused: {e!r}")
    os.close(log)


def acquire_in_thread(lock, **kwargs):
    """Starts lock.acquire(**kwargs) in a thread; returns the thread, an
    Event set when it returned True, and a list holding when."""
    acquired, when = threading.Event(), []

    def run():
        if lock.acquire(**kwargs):
            when.append(time.monotonic())
            acquired.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, acquired, when


def woken_after(release, t, acquired, when):
    """Calls release, then waits up to 5 s for the waiter of
    acquire_in_thread: True when it acquired within 2 s of the release
    (woken by it, not by BLPOP's timeout), else what happened."""
    released = time.monotonic()
    release()
    if not acquired.wait(5):
        return "the waiter did not acquire within 5 s of the release"
    t.join()
    return within(round(when[0] - released, 2), 0, 2)


def woken_by_release(owner, other):
    """other waits in BLPOP while owner holds the lock: True when the
    owner's release wakes it (woken_after), else what happened."""
    t, acquired, when = acquire_in_thread(other, blocking=True, timeout=8)
    if acquired.wait(0.3):
        return "acquired while held"
    return woken_after(owner.release, t, acquired, when)


def scenario_no_expire(r):
    """Lock(expire=None): what the library offers a lock without a TTL."""
    c = Checks()
    key = "lock:" + SCENARIO
    owner = redis_lock.Lock(r, SCENARIO, expire=None)
    other = redis_lock.Lock(r, SCENARIO, expire=None)

    def ttl():
        # One Redis keeps it for ever (-1); lockproxy keeps its session
        # lease (10 s by default), renewed while the connection is open.
        t = r.ttl(key)
        return True if t == -1 or 0 < t <= 10 else f"TTL {t}"

    c.check("acquire", lambda: expect(owner.acquire(blocking=False), True))
    c.check("GET lock:<name> is the owner's id", lambda: expect(owner.get_owner_id(), owner.id))
    c.check("no TTL of its own", ttl)
    c.check("locked()", lambda: expect(other.locked(), True))
    c.check("non-blocking acquire by a second Lock while held", lambda: expect(other.acquire(blocking=False), False))
    c.check("release by another id raises NotAcquired", lambda: raises(redis_lock.NotAcquired, other.release))

    c.check("a waiter in BLPOP gets the lock once the owner releases it", lambda: woken_by_release(owner, other))
    c.check("the new owner holds it", lambda: expect(other.get_owner_id(), other.id))
    c.check("released by the new owner", lambda: expect(other.release(), None))
    c.check("free at the end", lambda: expect(r.get(key), None))
    if c.failed:
        sys.exit(f"{len(c.failed)} checks failed: {', '.join(c.failed)}")


def scenario(addr):
    r = connect(addr)
    print(f"python-redis-lock {version('python-redis-lock')}, redis-py {redis.__version__}, "
          f"protocol {os.environ.get('REDISPY_PROTOCOL', 'default')}, expire {'None' if NO_EXPIRE else 'set'}", flush=True)
    if NO_EXPIRE:
        scenario_no_expire(r)
        return
    c = Checks()
    key = "lock:" + SCENARIO
    owner = redis_lock.Lock(r, SCENARIO, expire=10)
    other = redis_lock.Lock(r, SCENARIO, expire=10)

    c.check("acquire", lambda: expect(owner.acquire(blocking=False), True))
    c.check("GET lock:<name> is the owner's id", lambda: expect(owner.get_owner_id(), owner.id))
    c.check("TTL about expire", lambda: within(r.ttl(key), 9, 10))
    c.check("locked()", lambda: expect(other.locked(), True))
    c.check("non-blocking acquire by a second Lock while held", lambda: expect(other.acquire(blocking=False), False))

    def blocked():
        start = time.monotonic()
        got = other.acquire(blocking=True, timeout=1)
        waited = time.monotonic() - start
        if got:
            return "acquired a held lock"
        return within(round(waited, 2), 0.9, 5)

    c.check("blocking acquire with timeout=1 returns False while held, after BLPOP's second", blocked)
    c.check("release by another id raises NotAcquired", lambda: raises(redis_lock.NotAcquired, other.release))
    c.check("extend by another id raises NotAcquired", lambda: raises(redis_lock.NotAcquired, other.extend))
    c.check("extend(20) by the owner", lambda: expect(owner.extend(expire=20), None))
    c.check("TTL after extend(20)", lambda: within(r.ttl(key), 19, 20))

    c.check("a waiter in BLPOP gets the lock once the owner releases it", lambda: woken_by_release(owner, other))
    c.check("the new owner holds it", lambda: expect(other.get_owner_id(), other.id))
    c.check("release by the former owner raises NotAcquired", lambda: raises(redis_lock.NotAcquired, owner.release))

    def woken_by_reset():
        waiter = redis_lock.Lock(r, SCENARIO, expire=10)
        t, acquired, when = acquire_in_thread(waiter, blocking=True, timeout=8)
        if acquired.wait(0.3):
            return "acquired while held"
        got = woken_after(redis_lock.Lock(r, SCENARIO).reset, t, acquired, when)
        if acquired.is_set():
            waiter.release()
        return got

    c.check("reset() forces the lock free and wakes a waiter", woken_by_reset)

    def auto_renewal():
        # Held for well past its expire by the renewal thread, while a
        # waiter blocks (BLPOP for expire seconds, again and again).
        holder = redis_lock.Lock(r, SCENARIO, expire=2, auto_renewal=True)
        if not holder.acquire(blocking=False):
            return "the renewing holder did not acquire"
        waiter = redis_lock.Lock(r, SCENARIO, expire=10)
        t, acquired, when = acquire_in_thread(waiter, blocking=True)
        if acquired.wait(5):
            holder.release()
            return "the waiter acquired while the renewed lock was held"
        got = woken_after(holder.release, t, acquired, when)
        if acquired.is_set():
            waiter.release()
        return got

    c.check("auto_renewal holds past expire while a waiter blocks; released, the waiter gets it", auto_renewal)
    c.check("free at the end", lambda: expect(r.get(key), None))

    if c.failed:
        sys.exit(f"{len(c.failed)} checks failed: {', '.join(c.failed)}")


def handoff(addr_a, addr_b):
    """A holder on proxy A, a waiter blocked in BLPOP on proxy B (its
    timeout the lock's 30 s expire): the release on A wakes it. Prints the
    time from the release to the waiter's acquisition."""
    a, b = connect(addr_a), connect(addr_b)
    name = "compat:handoff"
    holder = redis_lock.Lock(a, name, expire=30)
    if not holder.acquire(blocking=False):
        sys.exit("the holder did not acquire")
    waiter = redis_lock.Lock(b, name, expire=30)
    t, acquired, when = acquire_in_thread(waiter, blocking=True)
    deadline = time.monotonic() + 10
    # Polling a condition: proxy B counts the waiter in its INFO.
    while b.info("waits").get("waiters") != 1:
        if time.monotonic() > deadline or acquired.is_set():
            sys.exit(f"proxy B never counted the waiter: {b.info('waits')}")
        time.sleep(0.005)
    released = time.monotonic()
    holder.release()
    if not acquired.wait(10):
        sys.exit("the waiter on proxy B did not acquire within 10 s of the release on proxy A")
    t.join()
    print(f"woken after {(when[0] - released) * 1000:.1f} ms", flush=True)
    waiter.release()


def noexpire(addr):
    """Lock(expire=None): SET NX without an expiry. Prints what acquire did."""
    r = connect(addr)
    lock = redis_lock.Lock(r, "compat:noexpire")
    try:
        got = lock.acquire(blocking=False)
    except redis.ResponseError as e:
        print(f"ResponseError: {e}", flush=True)
        return
    print(f"acquired: {got}", flush=True)
    if got:
        lock.release()


def expire(addr, seconds):
    """Lock(expire=seconds, auto_renewal=True), as Weblate takes its locks:
    acquired with that TTL, extended as its renewal thread does, released.
    Exits non-zero when a check fails."""
    r = connect(addr)
    c = Checks()
    name = "compat:expire"
    key = "lock:" + name
    lock = redis_lock.Lock(r, name, expire=seconds, auto_renewal=True)
    other = redis_lock.Lock(r, name, expire=seconds)
    c.check(f"acquire with expire={seconds}", lambda: expect(lock.acquire(blocking=False), True))
    c.check("TTL about expire", lambda: within(r.ttl(key), seconds - 1, seconds))
    c.check("non-blocking acquire by a second Lock while held", lambda: expect(other.acquire(blocking=False), False))
    # What the renewal thread sends every two thirds of expire.
    c.check("extend() by the owner", lambda: expect(lock.extend(), None))
    c.check("TTL about expire after extend()", lambda: within(r.ttl(key), seconds - 1, seconds))
    c.check("release", lambda: expect(lock.release(), None))
    c.check("free after release", lambda: expect(r.get(key), None))
    if c.failed:
        sys.exit(f"{len(c.failed)} checks failed: {', '.join(c.failed)}")


HELD = "compat:held"


def hold(lib, addr, seconds):
    """Takes HELD without a TTL, prints "acquired", holds it (without
    renewing: neither library renews a lock without a TTL), then releases it
    and prints "released"; or holds it until killed."""
    r = connect(addr)
    if lib == "redis-py":
        lock = r.lock(HELD, timeout=None)
    elif lib == "python-redis-lock":
        lock = redis_lock.Lock(r, HELD, expire=None)
    else:
        sys.exit(f"hold: no library {lib!r}")
    if not lock.acquire(blocking=False):
        sys.exit(f"hold: {lib} did not acquire {HELD}")
    print("acquired", flush=True)
    if seconds == "forever":
        while True:
            time.sleep(60)
    time.sleep(float(seconds))
    lock.release()
    print("released", flush=True)


def main(argv):
    if len(argv) == 6 and argv[1] == "contend":
        contend(argv[2], argv[3], int(argv[4]), argv[5])
    elif len(argv) == 3 and argv[1] == "scenario":
        scenario(argv[2])
    elif len(argv) == 6 and argv[1] == "suite":
        suite(argv[2:], contend, scenario)
    elif len(argv) == 4 and argv[1] == "handoff":
        handoff(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "noexpire":
        noexpire(argv[2])
    elif len(argv) == 4 and argv[1] == "expire":
        expire(argv[2], int(argv[3]))
    elif len(argv) == 5 and argv[1] == "hold":
        hold(argv[2], argv[3], argv[4])
    else:
        sys.exit(f"usage: {argv[0]} contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS | handoff ADDR_A ADDR_B | noexpire ADDR | expire ADDR SECONDS | hold LIB ADDR SECONDS|forever")


if __name__ == "__main__":
    main(sys.argv)
