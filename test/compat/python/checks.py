"""The checks harness of the Python compatibility programs' scenarios.

Each check runs, prints one line ("ok   name" or "FAIL name: why"), and a
failure is remembered rather than raised, so that one failing check does
not hide the others. A check's function answers True, or a string saying
what was wrong (expect, within, raises build those).
"""


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
