#!/usr/bin/python3
"""redis-py's optimistic-transaction recipe (its README: pipeline, watch,
multi, execute, WatchError) for a lock through lockproxy: SET NX PX to
acquire; to release, WATCH the key, GET it, and when it holds our token
MULTI, DEL, EXEC; to extend, the same with PEXPIRE. lockproxy runs the
transaction as one quorum compare-and-delete or compare-and-pexpire.

Follows the compatibility contract of test/compat_test.go:

    redispy_watch.py contend ADDR LOGFILE ROUNDS WORKER
    redispy_watch.py scenario ADDR
    redispy_watch.py suite ADDR LOGFILE ROUNDS WORKERS

Run it with Debian's /usr/bin/python3 and its python3-redis (4.3.4), or in
a PyPI environment; REDISPY_PROTOCOL=3 connects with RESP3 (redis-py 5+).
The checks are redispy_recipe.py's, with these release and extend.
"""

import sys

import redis

# No __pycache__ beside the programs when importing the recipe's checks.
sys.dont_write_bytecode = True
import redispy_recipe  # noqa: E402


def release(r, key, token):
    return transact(r, key, token, lambda pipe: pipe.delete(key))


def extend(r, key, token, ttl_ms):
    return transact(r, key, token, lambda pipe: pipe.pexpire(key, ttl_ms))


def transact(r, key, token, op):
    """Runs op in a transaction when key holds token; 1 when it ran, 0 when
    the key held something else or changed before EXEC."""
    with r.pipeline() as pipe:
        try:
            pipe.watch(key)
            if pipe.get(key) != token.encode():
                pipe.unwatch()
                return 0
            pipe.multi()
            op(pipe)
            pipe.execute()
            return 1
        except redis.WatchError:
            return 0


if __name__ == "__main__":
    redispy_recipe.main(sys.argv, release, extend)
