"""Loaded by rlenv's frozen world with libfaketime, copied as ``sitecustomize.py``: what
libfaketime 0.9.10 leaves undone for a Python program.

- Sleep. Python >= 3.11 sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which
  libfaketime 0.9.10 turns into EINVAL when the monotonic clock is left real
  (wolfcw/libfaketime#426); sleep on select() instead.
- File times. libfaketime fakes ``stat``, ``lstat`` and ``fstat`` (FAKE_STAT, on unless
  NO_FAKE_STAT is set) but not ``stat64``/``fstatat64``/``statx``, which Python (glibc >= 2.33)
  calls: a file made now showed the host's real date. ``os.stat``, ``os.lstat`` and
  ``os.fstat`` (and so ``pathlib``, ``os.path.getmtime``...) report a time from this process's
  start on as libfaketime's clock does: shifted by (faked now - real now). Earlier times (a
  snapshot copy's fixed mtime 0, system files) are left as they are, so they stay the same
  from run to run.

Runs under the world's interpreters (a worker, a tool's child, a sandboxed program): standard
library only. Importing it under any other name changes nothing.
"""

from __future__ import annotations

import os as _os
import select as _select
import time as _time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, SupportsIndex


def _sleep(seconds: float | SupportsIndex, _monotonic: Any = _time.monotonic) -> None:
    # the real monotonic clock, bound where freezegun does not look: it replaces
    # time.monotonic, and every module attribute that is it, in a worker
    delay = float(seconds)
    if delay < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = _monotonic() + delay
    while True:
        remaining = deadline - _monotonic()
        if remaining <= 0:
            return
        _select.select([], [], [], remaining)


def _clock_shift() -> tuple[int, int] | None:
    """(real start in ns, faked - real in ns), or None when the clock is not faked. The real
    now is the creation time of this process's /proc entry (its stat is not faked)."""
    if not _os.environ.get("FAKETIME"):
        return None
    try:
        real = _os.stat("/proc/self").st_ctime_ns
    except OSError:
        return None
    offset = _time.time_ns() - real
    return (real, offset) if abs(offset) > 60 * 10**9 else None


_SHIFT = _clock_shift()
_NAMES = (("st_atime", 7), ("st_mtime", 8), ("st_ctime", 9))


def _shifted(result: Any) -> Any:
    since, offset = _SHIFT  # type: ignore[misc]
    kind, (visible, hidden) = result.__reduce__()
    visible, hidden = list(visible), dict(hidden)
    for name, index in _NAMES:
        nanoseconds = hidden[name + "_ns"]
        if nanoseconds >= since:
            nanoseconds += offset
            hidden[name + "_ns"] = nanoseconds
            hidden[name] = nanoseconds / 1e9
            visible[index] = nanoseconds // 10**9
    return kind(visible, hidden)


def _faking(function: Any) -> Any:
    def faked(*args: Any, **kwargs: Any) -> Any:
        return _shifted(function(*args, **kwargs))

    faked.__name__ = function.__name__
    faked.__doc__ = function.__doc__
    return faked


if __name__ == "sitecustomize":
    _time.sleep = _sleep
    if _SHIFT is not None:
        _os.stat = _faking(_os.stat)
        _os.lstat = _faking(_os.lstat)
        _os.fstat = _faking(_os.fstat)
