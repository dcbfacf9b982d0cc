#!/usr/bin/python3
"""redis-py's redis.lock.Lock through lockproxy, unchanged.

Follows the compatibility contract of test/compat_test.go:

    redispy_lock.py contend ADDR LOGFILE ROUNDS WORKER
    redispy_lock.py scenario ADDR
    redispy_lock.py suite ADDR LOGFILE ROUNDS WORKERS

Run it with Debian's /usr/bin/python3 and its python3-redis (4.3.4), or
with the Python of a virtual environment of requirements/ (redis-py 5 and
later). REDISPY_PROTOCOL=3 connects with protocol=3 (RESP3, HELLO 3); unset,
the Redis() call is the one every redis-py version takes, RESP2.
"""

import os
import sys
import threading
import time

import redis
from redis.exceptions import LockNotOwnedError

# No __pycache__ beside the programs when importing the shared checks.
sys.dont_write_bytecode = True
from checks import Checks, expect, raises, suite, within  # noqa: E402
from redispy_recipe import connect  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"




def contend(addr, logfile, rounds, worker):
    r = connect(addr)
    log = os.open(logfile, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    for n in range(rounds):
        lock = r.lock(CONTENDED, timeout=10, sleep=0.005, blocking=True, blocking_timeout=60)
        if not lock.acquire():
            sys.exit(f"worker {worker} round {n}: not acquired within 60 s")
        os.write(log, f"enter {worker}-{n}\n".encode())
        time.sleep(0.002)
        os.write(log, f"exit {worker}-{n}\n".encode())
        try:
            lock.release()
        except LockNotOwnedError as e:
            sys.exit(f"worker {worker} round {n}: release as owner refused: {e!r}")
    os.close(log)


def scenario(addr):
    r = connect(addr)
    print(f"redis-py {redis.__version__}, protocol {os.environ.get('REDISPY_PROTOCOL', 'default')}", flush=True)
    c = Checks()
    # The owner keeps its token in a plain namespace (thread_local=False) so
    # that a timer thread can release it while another Lock waits.
    owner = r.lock(SCENARIO, timeout=10, sleep=0.02, thread_local=False)
    other = r.lock(SCENARIO, timeout=10, sleep=0.02)

    c.check("acquire", lambda: expect(owner.acquire(blocking=False), True))
    c.check("owned() by the owner", lambda: expect(owner.owned(), True))
    c.check("locked()", lambda: expect(owner.locked(), True))
    c.check("PTTL about the lock's timeout", lambda: within(r.pttl(SCENARIO), 9000, 10000))

    def blocked():
        start = time.monotonic()
        got = other.acquire(blocking=True, blocking_timeout=0.3)
        waited = time.monotonic() - start
        if got:
            return "acquired a held lock"
        return within(round(waited, 2), 0.2, 5)

    c.check("blocking acquire by a second Lock times out while held", blocked)
    c.check("non-blocking acquire by a second Lock while held", lambda: expect(other.acquire(blocking=False), False))

    # A second owner is simulated the way lock.py keeps ownership: its token.
    other.local.token = b"other"
    c.check("owned() with another token", lambda: expect(other.owned(), False))
    c.check("locked() seen by another token", lambda: expect(other.locked(), True))
    c.check("extend with another token raises LockNotOwnedError", lambda: raises(LockNotOwnedError, lambda: other.extend(5)))
    c.check("reacquire with another token raises LockNotOwnedError", lambda: raises(LockNotOwnedError, other.reacquire))
    other.local.token = b"other"
    c.check("release with another token raises LockNotOwnedError", lambda: raises(LockNotOwnedError, other.release))
    c.check("owner still owns it after the refused release", lambda: expect(owner.owned(), True))

    c.check("extend(5) adds to the TTL", lambda: expect(owner.extend(5), True))
    c.check("PTTL after extend(5)", lambda: within(r.pttl(SCENARIO), 13000, 15000))
    c.check("extend(3, replace_ttl=True)", lambda: expect(owner.extend(3, replace_ttl=True), True))
    c.check("PTTL after extend(3, replace_ttl=True)", lambda: within(r.pttl(SCENARIO), 2000, 3000))
    # reacquire() must visibly reset the TTL to the lock's timeout, so it
    # starts from a TTL well below it (as extend(3, replace_ttl=True) left it).
    left = r.pttl(SCENARIO)
    if left > 8500:
        time.sleep((left - 8500) / 1000)
    c.check("reacquire()", lambda: expect(owner.reacquire(), True))
    c.check("PTTL after reacquire()", lambda: within(r.pttl(SCENARIO), 9000, 10000))
    c.check("owned() after extend and reacquire", lambda: expect(owner.owned(), True))

    def waits_for_release():
        releaser = threading.Timer(0.3, owner.release)
        releaser.start()
        start = time.monotonic()
        try:
            got = other.acquire(blocking=True, blocking_timeout=5)
        finally:
            releaser.join()
        waited = time.monotonic() - start
        if not got:
            return "not acquired within 5 s of the owner's release"
        return within(round(waited, 2), 0.25, 5)

    c.check("blocking acquire gets the lock once the owner releases it", waits_for_release)
    c.check("owned() by the new owner", lambda: expect(other.owned(), True))
    c.check("owned() by the former owner", lambda: expect(owner.owned(), False))
    c.check("release by the new owner", lambda: expect(other.release(), None))
    c.check("not locked() after release", lambda: expect(other.locked(), False))
    c.check("acquire again after release", lambda: expect(owner.acquire(blocking=False), True))
    c.check("release again", lambda: expect(owner.release(), None))

    short = r.lock(SCENARIO, timeout=0.3)
    c.check("acquire with a 0.3 s timeout", lambda: expect(short.acquire(blocking=False), True))
    time.sleep(0.6)
    c.check("not locked() once expired", lambda: expect(short.locked(), False))
    c.check("owned() false once expired", lambda: expect(short.owned(), False))
    c.check("extend after expiry raises LockNotOwnedError", lambda: raises(LockNotOwnedError, lambda: short.extend(1)))
    c.check("release after expiry raises LockNotOwnedError", lambda: raises(LockNotOwnedError, short.release))
    c.check("free at the end", lambda: expect(r.get(SCENARIO), None))

    if c.failed:
        sys.exit(f"{len(c.failed)} checks failed: {', '.join(c.failed)}")


def main(argv):
    if len(argv) == 6 and argv[1] == "contend":
        contend(argv[2], argv[3], int(argv[4]), argv[5])
    elif len(argv) == 3 and argv[1] == "scenario":
        scenario(argv[2])
    elif len(argv) == 6 and argv[1] == "suite":
        suite(argv[2:], contend, scenario)
    else:
        sys.exit(f"usage: {argv[0]} contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS")


if __name__ == "__main__":
    main(sys.argv)
