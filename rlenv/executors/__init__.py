"""Where rollouts execute: frozen-world worker processes on this machine (`local`) or Ray
actors (`ray`), both behind the `Executor` protocol; `make_executor` picks one."""

from __future__ import annotations

import os

from rlenv.errors import UserError
from rlenv.executors.base import Executor
from rlenv.worker.config import WorkerConfig

KINDS = ("local", "ray")


def check_executor(kind: str, address: str | None) -> None:
    """The executor choice is valid and, for Ray, reachable: checked before any run directory."""
    if kind not in KINDS:
        raise UserError(f"--executor must be local or ray, not {kind!r}")
    if address and kind != "ray":
        raise UserError("--address needs --executor ray")
    if kind == "ray":
        from rlenv.executors.ray import preflight

        preflight(address)  # Ray installed, the cluster answers


MAX_WORKERS = 256
"""`--workers` at most: each local worker is a process of 50-100 MB."""


def default_workers(concurrency: int) -> int:
    """The pool when `--workers` is not given: one frozen world per core, and never more than
    rollouts in flight (a rollout holds at most one worker at a time)."""
    return max(1, min(concurrency, os.cpu_count() or 1))


def make_executor(
    kind: str,
    config: WorkerConfig,
    workers: int,
    address: str | None = None,
    *,
    exact: bool = False,
    early: Executor | None = None,
) -> Executor:
    """Start `workers` frozen-world workers of `kind` (local: at most one per CPU unless
    `exact`, the user's `--workers`; a Ray cluster caps the actors at its own CPU count)."""
    if kind == "ray":
        from rlenv.executors.ray import RayExecutor

        return RayExecutor(config, workers, address)
    from rlenv.executors.local import LocalExecutor

    given = early if isinstance(early, LocalExecutor) else None  # workers started before
    return LocalExecutor(config, workers if exact else min(workers, os.cpu_count() or 1), given)


def world_modes(executor: str = "local") -> dict[str, str]:
    """Which isolation mechanisms were in force (not part of the digest)."""
    from rlenv.sandbox import faketime_library, probe_mechanism
    from rlenv.world.netguard import network_guard_mode

    return {
        "sandbox": probe_mechanism(),
        # Ray: the floor on any node (an actor's worker gets a network namespace where its
        # node can make one; the driver cannot know that of every node)
        "network_guard": "python" if executor == "ray" else network_guard_mode(False),
        "subprocess_clock": "libfaketime" if faketime_library() else "real",
        "python_clock": "freezegun",
    }


__all__ = [
    "KINDS",
    "MAX_WORKERS",
    "Executor",
    "check_executor",
    "default_workers",
    "make_executor",
    "world_modes",
]
