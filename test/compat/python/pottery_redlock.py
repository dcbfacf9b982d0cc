"""pottery's Redlock through lockproxy, unchanged, with the proxy as its one
master: pottery's own Redlock over one "master" becomes lockproxy's Redlock
over the backends.

Follows the compatibility contract of test/compat_test.go:

    pottery_redlock.py contend ADDR LOGFILE ROUNDS WORKER
    pottery_redlock.py scenario ADDR
    pottery_redlock.py suite ADDR LOGFILE ROUNDS WORKERS

Run it with the Python of the virtual environment of requirements/pottery.txt.
pottery keeps the lock at "redlock:" + key.
"""

import os
import sys
import threading
import time
from importlib.metadata import version

import redis
from pottery import ExtendUnlockedLock, Redlock, ReleaseUnlockedLock, TooManyExtensions

# No __pycache__ beside the programs when importing the shared checks.
sys.dont_write_bytecode = True
from checks import Checks, expect, raises, suite, within  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=10)


def contend(addr, logfile, rounds, worker):
    r = connect(addr)
    log = os.open(logfile, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    for n in range(rounds):
        lock = Redlock(key=CONTENDED, masters={r}, auto_release_time=10)
        if not lock.acquire(blocking=True, timeout=60):
            sys.exit(f"worker {worker} round {n}: not acquired within 60 s")
        os.write(log, f"enter {worker}-{n}\n".encode())
        time.sleep(0.002)
        os.write(log, f"exit {worker}-{n}\n".encode())
        try:
            lock.release()
        except ReleaseUnlockedLock as e:
            sys.exit(f"worker {worker} round {n}: release as owner refused: {e!r}")
    os.close(log)


def scenario(addr):
    r = connect(addr)
    print(f"pottery {version('pottery')}, redis-py {redis.__version__}", flush=True)
    c = Checks()
    key = "redlock:" + SCENARIO
    owner = Redlock(key=SCENARIO, masters={r}, auto_release_time=10)
    other = Redlock(key=SCENARIO, masters={r}, auto_release_time=10)

    c.check("acquire", lambda: expect(owner.acquire(blocking=False), True))
    # locked() is the validity left, in seconds: the backends' PTTL less
    # pottery's drift allowance.
    c.check("locked() by the owner: the validity left", lambda: within(owner.locked(), 9, 10))
    c.check("PTTL about the lock's auto_release_time", lambda: within(r.pttl(key), 9000, 10000))
    c.check("non-blocking acquire by a second Redlock while held", lambda: expect(other.acquire(blocking=False), False))

    def blocked():
        start = time.monotonic()
        got = other.acquire(blocking=True, timeout=0.3)
        waited = time.monotonic() - start
        if got:
            return "acquired a held lock"
        return within(round(waited, 2), 0.2, 5)

    c.check("blocking acquire by a second Redlock times out while held", blocked)
    c.check("locked() by another token is 0", lambda: expect(other.locked(), 0))
    c.check("extend by another token raises ExtendUnlockedLock", lambda: raises(ExtendUnlockedLock, other.extend))
    c.check("release by another token raises ReleaseUnlockedLock", lambda: raises(ReleaseUnlockedLock, other.release))
    c.check("owner still holds it after the refused release", lambda: within(owner.locked(), 8, 10))

    # extend() renews the lease to auto_release_time: raising it first makes
    # the extension visible in the PTTL.
    owner.auto_release_time = 20
    c.check("extend() to a 20 s lease", lambda: expect(owner.extend(), None))
    c.check("PTTL after extend()", lambda: within(r.pttl(key), 19000, 20000))
    c.check("locked() after extend()", lambda: within(owner.locked(), 19, 20))
    c.check("second extend()", lambda: expect(owner.extend(), None))
    c.check("third extend()", lambda: expect(owner.extend(), None))
    c.check("a fourth extend() raises TooManyExtensions", lambda: raises(TooManyExtensions, owner.extend))

    def waits_for_release():
        releaser = threading.Timer(0.3, owner.release)
        releaser.start()
        start = time.monotonic()
        try:
            got = other.acquire(blocking=True, timeout=5)
        finally:
            releaser.join()
        waited = time.monotonic() - start
        if not got:
            return "not acquired within 5 s of the owner's release"
        return within(round(waited, 2), 0.25, 5)

    c.check("blocking acquire gets the lock once the owner releases it", waits_for_release)
    c.check("locked() by the new owner", lambda: within(other.locked(), 9, 10))
    c.check("locked() by the former owner is 0", lambda: expect(owner.locked(), 0))
    c.check("release by the former owner raises ReleaseUnlockedLock", lambda: raises(ReleaseUnlockedLock, owner.release))
    c.check("release by the new owner", lambda: expect(other.release(), None))
    c.check("free after release", lambda: expect(r.get(key), None))

    def context_manager():
        with Redlock(key=SCENARIO, masters={r}, auto_release_time=10) as held:
            inside = held.locked()
            if not 9 <= inside <= 10:
                return f"locked() inside the with block: {inside!r}"
        return expect(r.get(key), None)

    c.check("with Redlock(...): held inside, free after", context_manager)

    short = Redlock(key=SCENARIO, masters={r}, auto_release_time=0.3)
    c.check("acquire with a 0.3 s auto_release_time", lambda: expect(short.acquire(blocking=False), True))
    time.sleep(0.6)
    c.check("locked() is 0 once expired", lambda: expect(short.locked(), 0))
    c.check("extend after expiry raises ExtendUnlockedLock", lambda: raises(ExtendUnlockedLock, short.extend))
    c.check("release after expiry raises ReleaseUnlockedLock", lambda: raises(ReleaseUnlockedLock, short.release))
    c.check("free at the end", lambda: expect(r.get(key), None))

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
