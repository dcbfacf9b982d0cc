#!/usr/bin/python3
"""redis-py's RedisCluster, unchanged, through lockproxy in cluster mode.

Follows the compatibility contract of test/compat_test.go, ADDR being one
lockproxy instance (the seed: the client learns the others from CLUSTER
SLOTS), or for suite several, comma-separated, that seed the workers in turn:

    redispy_cluster.py contend ADDR LOGFILE ROUNDS WORKER
    redispy_cluster.py scenario ADDR
    redispy_cluster.py suite ADDR LOGFILE ROUNDS WORKERS

Run it with the Python of a virtual environment of requirements/ (redis-py
5 and later). REDISPY_PROTOCOL=3 connects with protocol=3 (RESP3).
"""

import os
import sys
import time

import redis
from redis.cluster import RedisCluster
from redis.exceptions import LockNotOwnedError

sys.dont_write_bytecode = True
from checks import Checks, expect, raises, suite, within  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"


def connect(addr):
    host, port = addr.rsplit(":", 1)
    kwargs = {}
    if os.environ.get("REDISPY_PROTOCOL") == "3":
        kwargs["protocol"] = 3
    return RedisCluster(host=host, port=int(port), **kwargs)


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
    print(f"redis-py {redis.__version__} RedisCluster, protocol {os.environ.get('REDISPY_PROTOCOL', 'default')}", flush=True)
    c = Checks()
    c.check("two nodes, every slot", lambda: expect(
        sorted((n.host, n.port) for n in r.get_nodes()) == sorted(
            (h, int(p)) for h, p in (a.rsplit(":", 1) for a in os.environ["LOCKPROXY_CLUSTER_NODES"].split(","))), True))
    owner = r.lock(SCENARIO, timeout=10, sleep=0.02, thread_local=False)
    other = r.lock(SCENARIO, timeout=10, sleep=0.02)
    c.check("acquire", lambda: expect(owner.acquire(blocking=False), True))
    c.check("owned() by the owner", lambda: expect(owner.owned(), True))
    c.check("PTTL about the lock's timeout", lambda: within(r.pttl(SCENARIO), 9000, 10000))
    c.check("non-blocking acquire by a second Lock while held", lambda: expect(other.acquire(blocking=False), False))
    other.local.token = b"other"
    c.check("release with another token raises LockNotOwnedError", lambda: raises(LockNotOwnedError, other.release))
    c.check("extend by the owner", lambda: expect(owner.extend(20), True))
    c.check("PTTL after extend", lambda: within(r.pttl(SCENARIO), 19000, 30000))
    c.check("release by the owner", lambda: expect(owner.release(), None))
    c.check("free after release", lambda: expect(r.get(SCENARIO), None))
    # redis-py splits a DEL of keys in different slots by slot itself;
    # keys sharing a hash tag go to one node whole.
    c.check("keys sharing a hash tag", lambda: expect(r.delete("{compat}a", "{compat}b"), 0))
    if c.failed:
        sys.exit(f"failed: {', '.join(c.failed)}")


def main():
    if sys.argv[1] == "contend":
        contend(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "scenario":
        scenario(sys.argv[2])
    elif sys.argv[1] == "suite":
        suite(sys.argv[2:], contend, scenario)
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")


if __name__ == "__main__":
    main()
