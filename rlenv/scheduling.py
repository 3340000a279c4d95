"""The scheduling policy of the processes that serve the orchestrator's event loop."""

from __future__ import annotations

import contextlib
import os


def behind_the_orchestrator() -> None:
    """Run this process (and what it forks from now on) SCHED_BATCH: the same share of the CPU
    as any process, but its wake-ups do not preempt a running one. Called first thing in a
    local worker (`rlenv.worker.protocol.serve`: its env code's children inherit it) and in the
    results writer (`rlenv.aside_writer`). The orchestrator's event loop wakes them with every
    batch of finish calls or records it writes; the kernel then often ran the woken process on
    the loop's own core at once, and the loop's write returned only after it. At 256 rollouts
    in flight (bench/concurrency.py's env, 100 ms), a finish batch's write took 0.06-0.08 ms at
    the median and 1.9-2.3 ms at p90; with the workers and the writer SCHED_BATCH, 0.03 and
    0.06 ms. A system that refuses the policy (or has none) leaves the process as it was."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


__all__ = ["behind_the_orchestrator"]
