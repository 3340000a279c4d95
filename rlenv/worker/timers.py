"""The rollout's clock in a worker: the in-worker alarm (`rollout_timer`, `timed_out`) and the
phase a worker is in (`set_phase`), kept where the orchestrator can read it after the worker died.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

from rlenv.agent import RolloutTimeout

PHASES = ("idle", "policy", "tool", "verifier", "reward")
"""What a worker is running, kept where the orchestrator can read it after the worker died."""
PHASE_STATUS = {
    "policy": "policy_error",
    "tool": "tool_error",
    "verifier": "verifier_error",
    "reward": "reward_error",
}
"""The status of a rollout whose worker died in that phase; a death between phases is the
policy's (never ``infra_error``: env code must not be able to take its rollout out of the
scores by killing its worker)."""

_phase_cell: Any = None  # a shared int (multiprocessing.RawValue) when the executor gives one
_expired = False  # the rollout's alarm fired, even if env code swallowed the exception


def use_phase_cell(cell: Any) -> None:
    """Keep this process's phase in `cell` (a shared int the orchestrator reads)."""
    global _phase_cell
    _phase_cell = cell


def set_phase(name: str) -> None:
    if _phase_cell is not None:
        _phase_cell.value = PHASES.index(name)


def phase_of(cell: Any) -> str:
    """The phase a (possibly dead) worker last entered, from its shared cell."""
    value = int(cell.value)
    return PHASES[value] if 0 <= value < len(PHASES) else "idle"


def install_alarm() -> None:
    """The rollout timer's signal handler (SIGALRM), for the worker's whole life."""
    signal.signal(signal.SIGALRM, _alarm)


def _alarm(signum: int, frame: Any) -> None:
    global _expired
    _expired = True
    raise RolloutTimeout("rollout timed out")


@contextlib.contextmanager
def rollout_timer(seconds: float) -> Any:
    """The in-worker alarm, the cheap first line of ``limits.timeout_s`` (the orchestrator
    kills a worker that outlives it: see ``rlenv.executors``)."""
    global _expired
    _expired = False
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        set_phase("idle")


def timed_out() -> bool:
    """True once the current rollout's alarm has fired."""
    return _expired


def timeout_message(timeout_s: float) -> str:
    """The error of every timed-out rollout, however it was stopped (deterministic)."""
    return f"rollout exceeded limits.timeout_s ({timeout_s:g} s)"
