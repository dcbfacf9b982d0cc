"""The checks harness of the Python compatibility programs' scenarios, and
their suite command.

Each check runs, prints one line ("ok   name" or "FAIL name: why"), and a
failure is remembered rather than raised, so that one failing check does
not hide the others. A check's function answers True, or a string saying
what was wrong (expect, within, raises build those).

suite(args, contend, scenario) runs the contract's

    <program> suite ADDR LOGFILE ROUNDS WORKERS

with a program's own contend and scenario functions (coroutine functions
for an asyncio program).
"""

import asyncio
import inspect
import sys
import threading


class Checks:
    def __init__(self):
        self.failed = []

    def check(self, name, fn):
        try:
            got = fn()
        except Exception as e:  # reported, not raised: the next checks still run
            got = f"raised {e!r}"
        self._report(name, got)

    def _report(self, name, got):
        if got is True:
            print(f"ok   {name}", flush=True)
        else:
            print(f"FAIL {name}: {got}", flush=True)
            self.failed.append(name)


class AsyncChecks(Checks):
    """Checks whose functions are coroutine functions."""

    async def check(self, name, coro_fn):
        try:
            got = await coro_fn()
        except Exception as e:  # reported, not raised: the next checks still run
            got = f"raised {e!r}"
        self._report(name, got)


def expect(got, want):
    return True if got == want else f"got {got!r}, want {want!r}"


async def eq(awaitable, want):
    return expect(await awaitable, want)


def within(got, lo, hi):
    return True if lo <= got <= hi else f"got {got!r}, want within [{lo}, {hi}]"


def _unraised(exc, got):
    return f"returned {got!r}, want {exc.__name__}"


def raises(exc, fn):
    try:
        got = fn()
    except exc:
        return True
    except Exception as e:
        return f"raised {e!r}, want {exc.__name__}"
    return _unraised(exc, got)


async def raises_async(exc, coro_fn):
    try:
        got = await coro_fn()
    except exc:
        return True
    except Exception as e:
        return f"raised {e!r}, want {exc.__name__}"
    return _unraised(exc, got)


def suite(args, contend, scenario):
    """Runs WORKERS contend workers at once, worker W through the (W mod n)th
    of ADDR's comma-separated addresses, then the scenario through the
    first, whatever the workers did, so that one run reports both; exits
    non-zero when a worker or a check failed. Threads for a blocking
    library, tasks on one event loop for an asyncio one: each worker's
    contend call makes its own client, so the proxy sees WORKERS clients
    as it saw WORKERS processes, and the interpreter starts once (starting
    one per worker was most of the suite's CPU)."""
    if len(args) != 4:
        sys.exit("usage: suite ADDR LOGFILE ROUNDS WORKERS")
    addrs, logfile, rounds, workers = args[0].split(","), args[1], int(args[2]), int(args[3])
    failed = []

    def failure(worker, e):
        # contend fails with sys.exit(why), which a thread would end on
        # silently and a task would raise out of the event loop.
        why = e.code if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
        print(f"FAIL worker {worker}: {why}", file=sys.stderr, flush=True)
        failed.append(worker)

    if inspect.iscoroutinefunction(contend):
        async def run():
            async def worker(w):
                try:
                    await contend(addrs[w % len(addrs)], logfile, rounds, str(w))
                except (Exception, SystemExit) as e:
                    failure(w, e)

            await asyncio.gather(*(worker(w) for w in range(workers)))
            await scenario(addrs[0])

        asyncio.run(run())
    else:
        def worker(w):
            try:
                contend(addrs[w % len(addrs)], logfile, rounds, str(w))
            except (Exception, SystemExit) as e:
                failure(w, e)

        threads = [threading.Thread(target=worker, args=(w,), name=f"worker-{w}") for w in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        scenario(addrs[0])
    if failed:
        sys.exit(f"{len(failed)} of {workers} workers failed: {', '.join(map(str, sorted(failed)))}")
