"""Loaded by rlenv's sandbox with libfaketime, copied as ``sitecustomize.py``. Python >= 3.11
sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which libfaketime 0.9.10 turns
into EINVAL when the monotonic clock is left real (wolfcw/libfaketime#426); sleep on select()
instead.

Runs under the sandboxed program's interpreter: standard library only. Importing it under any
other name changes nothing.
"""

from __future__ import annotations

import select as _select
import time as _time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import SupportsIndex


def _sleep(seconds: float | SupportsIndex) -> None:
    delay = float(seconds)
    if delay < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = _time.monotonic() + delay
    while True:
        remaining = deadline - _time.monotonic()
        if remaining <= 0:
            return
        _select.select([], [], [], remaining)


if __name__ == "sitecustomize":
    _time.sleep = _sleep
