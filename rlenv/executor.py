"""Where rollouts execute: a pool of frozen-world worker processes on this machine."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from rlenv.agent import ToolOutcome, Trajectory
from rlenv.errors import RunFailed
from rlenv.world import runtime
from rlenv.world.runtime import FROZEN_ENV, RolloutTask, WorkerConfig

_NETNS_PREFIX: list[str] | None = None


def netns_prefix() -> list[str]:
    """The command prefix that starts a process in a fresh network namespace, or [] if none works.

    A worker in its own network namespace has no route out at all, so even a subprocess a tool
    starts cannot reach the network; the in-process guard then only adds a clearer message.
    """
    global _NETNS_PREFIX
    if _NETNS_PREFIX is None:
        _NETNS_PREFIX = []
        if shutil.which("unshare") and os.environ.get("RLENV_NO_NETNS") != "1":
            for prefix in (["unshare", "--net"], ["unshare", "--net", "--map-root-user"]):
                try:
                    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if probe.returncode == 0:
                    _NETNS_PREFIX = prefix
                    break
    return list(_NETNS_PREFIX)


def network_guard_mode(live_tools: bool) -> str:
    if live_tools:
        return "off (recording)"
    return "netns+python" if netns_prefix() else "python"


class LocalExecutor:
    """Spawned worker processes, each entering the frozen world once at start."""

    def __init__(self, config: WorkerConfig, workers: int) -> None:
        self.workers = max(1, workers)
        saved = {key: os.environ.get(key) for key in FROZEN_ENV}
        os.environ.update(FROZEN_ENV)  # inherited by the spawned interpreters (hash seed!)
        context = multiprocessing.get_context("spawn")
        wrapper = None
        prefix = [] if config.live_tools else netns_prefix()
        if prefix:
            wrapper = Path(config.work_root) / ".worker-python"
            wrapper.write_text(
                "#!/bin/sh\nexec " + " ".join(prefix) + f' "{sys.executable}" "$@"\n'
            )
            wrapper.chmod(0o755)
            from multiprocessing import spawn

            previous_executable = spawn.get_executable()
            spawn.set_executable(str(wrapper))
        try:
            self.pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=runtime.init_worker,
                initargs=(config,),
            )
            # start every worker now, while the frozen environment variables are set
            futures = [self.pool.submit(os.getpid) for _ in range(self.workers * 2)]
            for future in futures:
                future.result()
        except BrokenProcessPool as exc:
            raise RunFailed(f"frozen-world worker failed to start: {exc}") from None
        finally:
            if wrapper is not None:
                spawn.set_executable(previous_executable)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    async def _call(self, function: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.pool, function, *args)
        except BrokenProcessPool as exc:
            raise RunFailed(f"a frozen-world worker died: {exc}") from None

    async def run_rollout(self, task: RolloutTask) -> dict[str, Any]:
        return await self._call(runtime.worker_run_rollout, task)  # type: ignore[no-any-return]

    async def prepare(self, task: RolloutTask) -> None:
        await self._call(runtime.worker_prepare, task)

    async def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int
    ) -> ToolOutcome:
        return await self._call(runtime.worker_tool, task, call, turn, number)  # type: ignore[no-any-return]

    async def finish(self, task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
        return await self._call(runtime.worker_finish, task, trajectory, model)  # type: ignore[no-any-return]

    async def grade(self, record: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
        return await self._call(runtime.worker_grade, record)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
