"""Where rollouts execute on this machine: a pool of spawned frozen-world worker processes,
each exec'd with only the world's environment variables (`rlenv.world.environment`), in fresh
network and pid namespaces when they can be made."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from rlenv import worker
from rlenv.agent import ToolOutcome, Trajectory
from rlenv.errors import RunFailed
from rlenv.worker import RolloutTask, WorkerConfig
from rlenv.world.environment import world_environment
from rlenv.world.freeze import FROZEN_ENV
from rlenv.world.netguard import netns_prefix


class LocalExecutor:
    """Spawned worker processes, each entering the frozen world once at start."""

    def __init__(self, config: WorkerConfig, workers: int) -> None:
        self.workers = max(1, workers)
        config = dataclasses.replace(config, parent_pid=os.getpid())  # workers die with us
        saved = {key: os.environ.get(key) for key in FROZEN_ENV}
        os.environ.update(FROZEN_ENV)  # inherited by the spawned interpreters (hash seed!)
        context = multiprocessing.get_context("spawn")
        # The worker interpreter is exec'd by this script with exactly the world's variables
        # (no OPENAI_API_KEY, no secret the orchestrator holds), in its own namespaces.
        # Recording is the exception: its tools call the live APIs with the user's keys.
        command: list[str] = []
        if not config.live_tools:
            variables = sorted(world_environment().items())
            command = ["env", "-i", *(f"{name}={value}" for name, value in variables)]
            command += netns_prefix()
        wrapper = Path(config.work_root) / ".worker-python"
        wrapper.write_text("#!/bin/sh\nexec " + shlex.join([*command, sys.executable]) + ' "$@"\n')
        wrapper.chmod(0o700)
        from multiprocessing import spawn

        previous_executable = spawn.get_executable()
        spawn.set_executable(str(wrapper))
        try:
            self.pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=worker.init_worker,
                initargs=(config,),
            )
            # start every worker now, while the frozen environment variables are set
            futures = [self.pool.submit(os.getpid) for _ in range(self.workers * 2)]
            for future in futures:
                future.result()
        except BrokenProcessPool as exc:
            raise RunFailed(f"frozen-world worker failed to start: {exc}") from None
        finally:
            spawn.set_executable(previous_executable)
            wrapper.unlink(missing_ok=True)
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
        return await self._call(worker.worker_run_rollout, task)  # type: ignore[no-any-return]

    async def prepare(self, task: RolloutTask) -> None:
        await self._call(worker.worker_prepare, task)

    async def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int
    ) -> ToolOutcome:
        return await self._call(worker.worker_tool, task, call, turn, number)  # type: ignore[no-any-return]

    async def finish(self, task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
        return await self._call(worker.worker_finish, task, trajectory, model)  # type: ignore[no-any-return]

    async def grade(self, record: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
        return await self._call(worker.worker_grade, record)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
