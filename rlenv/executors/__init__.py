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


def make_executor(
    kind: str, config: WorkerConfig, workers: int, address: str | None = None
) -> Executor:
    """Start `workers` frozen-world workers of `kind` (local: at most one per CPU; a Ray
    cluster caps the actors at its own CPU count)."""
    if kind == "ray":
        from rlenv.executors.ray import RayExecutor

        return RayExecutor(config, workers, address)
    from rlenv.executors.local import LocalExecutor

    return LocalExecutor(config, min(workers, os.cpu_count() or 1))


__all__ = ["KINDS", "Executor", "check_executor", "make_executor"]
