#!/usr/bin/python3
"""lockproxy's blocking acquire with redis-py: LOCK.ACQUIRE ... WAIT by
execute_command, released with the compare-and-delete EVAL.

Follows the compatibility contract of test/compat_test.go:

    redispy_blocking.py contend ADDR LOGFILE ROUNDS WORKER
    redispy_blocking.py scenario ADDR
    redispy_blocking.py suite ADDR LOGFILE ROUNDS WORKERS

The waits outlast no read timeout: redis-py has none unless socket_timeout
is set, and it is set here above the longest WAIT.
"""

import os
import sys
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from redispy_recipe import RELEASE, connect  # noqa: E402
from checks import Checks, expect, suite  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"


def acquire(r, key, token, ttl_ms, wait_ms):
    return r.execute_command("LOCK.ACQUIRE", key, token, "PX", ttl_ms, "WAIT", wait_ms)


def contend(addr, log, rounds, worker):
    r = connect(addr)
    r.connection_pool.connection_kwargs["socket_timeout"] = 60
    with open(log, "a", buffering=1) as f:
        for n in range(rounds):
            token = f"{worker}-{n}"
            while acquire(r, CONTENDED, token, 10000, 20000) is None:
                pass  # the wait ran out: wait again
            f.write(f"enter {token}\n")
            f.write(f"exit {token}\n")
            got = r.eval(RELEASE, 1, CONTENDED, token)
            if got != 1:
                sys.exit(f"release of {token} replied {got!r}, expected 1")


def scenario(addr):
    r = connect(addr)
    c = Checks()
    r.delete(SCENARIO)
    me, other = str(uuid.uuid4()), str(uuid.uuid4())
    c.check("acquire, free", lambda: expect(acquire(r, SCENARIO, me, 10000, 1000), b"OK"))
    c.check("another waits out its 200 ms", lambda: expect(acquire(r, SCENARIO, other, 10000, 200), None))
    c.check("release", lambda: expect(r.eval(RELEASE, 1, SCENARIO, me), 1))
    c.check("another takes it", lambda: expect(acquire(r, SCENARIO, other, 10000, 200), b"OK"))
    c.check("release by its holder", lambda: expect(r.eval(RELEASE, 1, SCENARIO, other), 1))
    if c.failed:
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "contend":
        contend(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "suite":
        suite(sys.argv[2:], contend, scenario)
    else:
        scenario(sys.argv[2])
