#!/usr/bin/python3
"""The redis.io lock recipe with redis-py through lockproxy: SET NX PX to
acquire, EVAL compare-and-delete to release, EVAL compare-and-pexpire to
extend.

Follows the compatibility contract of test/compat_test.go:

    redispy_recipe.py contend ADDR LOGFILE ROUNDS WORKER
    redispy_recipe.py scenario ADDR
    redispy_recipe.py suite ADDR LOGFILE ROUNDS WORKERS

Run it with Debian's /usr/bin/python3 and its python3-redis (4.3.4), or in
a PyPI environment; REDISPY_PROTOCOL=3 connects with RESP3 (redis-py 5+).
Other recipes (redispy_watch.py) run its checks with their own release and
extend: main(argv, release, extend).
"""

import os
import random
import sys
import time
import uuid
from functools import partial

import redis

# No __pycache__ beside the programs when importing the shared checks.
sys.dont_write_bytecode = True
from checks import suite  # noqa: E402

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"

RELEASE = """if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end"""

EXTEND = """if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("pexpire",KEYS[1],ARGV[2])
else
    return 0
end"""


def connect(addr, socket_timeout=10):
    """A client of addr; REDISPY_PROTOCOL=3 speaks RESP3. The other
    redis-py programs connect with it too."""
    host, port = addr.rsplit(":", 1)
    options = {}
    # redis-py 4.3 has no protocol argument: pass it only when asked for.
    if os.environ.get("REDISPY_PROTOCOL"):
        options["protocol"] = int(os.environ["REDISPY_PROTOCOL"])
    return redis.Redis(host=host, port=int(port), socket_timeout=socket_timeout, **options)


def acquire(r, key, token, ttl_ms):
    return r.set(key, token, nx=True, px=ttl_ms)


def release(r, key, token):
    return r.eval(RELEASE, 1, key, token)


def extend(r, key, token, ttl_ms):
    return r.eval(EXTEND, 1, key, token, ttl_ms)


def contend(addr, logfile, rounds, worker, release):
    r = connect(addr)
    log = os.open(logfile, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    for n in range(rounds):
        token = uuid.uuid4().hex
        deadline = time.monotonic() + 60
        while not acquire(r, CONTENDED, token, 10000):
            if time.monotonic() > deadline:
                sys.exit(f"worker {worker} round {n}: not acquired within 60 s")
            time.sleep(random.uniform(0.002, 0.005))
        os.write(log, f"enter {worker}-{n}\n".encode())
        time.sleep(0.002)
        os.write(log, f"exit {worker}-{n}\n".encode())
        got = release(r, CONTENDED, token)
        if got != 1:
            sys.exit(f"worker {worker} round {n}: release as owner returned {got!r}")
    os.close(log)


def scenario(addr, release, extend):
    r = connect(addr)
    failed = []

    def check(name, got, want):
        if got == want:
            print(f"ok   {name}", flush=True)
        else:
            print(f"FAIL {name}: got {got!r}, want {want!r}", flush=True)
            failed.append(name)

    owner, other = uuid.uuid4().hex, uuid.uuid4().hex
    check("acquire", acquire(r, SCENARIO, owner, 10000), True)
    check("acquire with another token while held", acquire(r, SCENARIO, other, 10000), None)
    check("extend as owner", extend(r, SCENARIO, owner, 20000), 1)
    pttl = r.pttl(SCENARIO)
    check("PTTL after extend above the first TTL", 10000 < pttl <= 20000, True)
    check("extend with another token", extend(r, SCENARIO, other, 20000), 0)
    check("release with another token", release(r, SCENARIO, other), 0)
    check("still held by the owner", r.get(SCENARIO), owner.encode())
    check("release as owner", release(r, SCENARIO, owner), 1)
    check("free after release", r.get(SCENARIO), None)
    check("release again as owner", release(r, SCENARIO, owner), 0)
    check("acquire again", acquire(r, SCENARIO, other, 10000), True)
    check("release the new holding", release(r, SCENARIO, other), 1)

    if failed:
        sys.exit(f"{len(failed)} checks failed: {', '.join(failed)}")


def main(argv, release=release, extend=extend):
    if len(argv) == 6 and argv[1] == "contend":
        contend(argv[2], argv[3], int(argv[4]), argv[5], release)
    elif len(argv) == 3 and argv[1] == "scenario":
        scenario(argv[2], release, extend)
    elif len(argv) == 6 and argv[1] == "suite":
        suite(argv[2:], partial(contend, release=release), partial(scenario, release=release, extend=extend))
    else:
        sys.exit(f"usage: {argv[0]} contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS")


if __name__ == "__main__":
    main(sys.argv)
