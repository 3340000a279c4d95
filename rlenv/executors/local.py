"""Where rollouts execute on this machine: a pool of spawned frozen-world worker processes,
each in a fresh network namespace when one can be made."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from rlenv import worker
from rlenv.agent import ToolOutcome, Trajectory
from rlenv.errors import RunFailed
from rlenv.worker import RolloutTask, WorkerConfig
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
                initializer=worker.init_worker,
                initargs=(config,),
            )
            # start every worker now, while the frozen environment variables are set
            futures = [self.pool.submit(worker.worker_ready) for _ in range(self.workers * 2)]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # a worker that cannot start: stop the others now
                self.pool.shutdown(wait=True, cancel_futures=True)
                raise
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
