"""A local executor's `finish` calls, batched: the calls waiting for a worker go to it in one
request ("finish_batch", `rlenv.worker.protocol`), answered one by one. At 256 rollouts in
flight a request and its round trip per rollout were a share of the orchestrator's CPU, and a
worker's wake-up per rollout of its own.

No task of its own: the first waiting call that finds a worker free for it leads a batch (takes
an idle worker and the calls waiting then, sends them, reads the replies) and, when it is done,
wakes the next waiting call to lead the next one. A worker grading one call of a batch holds the
batch's other trajectories, as a `run_batch` worker holds its batch's; each is graded under its
own limit, and its reply checked as its own (`rlenv.executors.replies`): a forged or oversized
reply is that rollout's error, never the run's. A worker that overruns or dies pins the call it
was in (the first not answered); the calls after it wait for a worker again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import pickle
from dataclasses import dataclass
from typing import Any

from rlenv.agent import Trajectory
from rlenv.executors import replies
from rlenv.executors.base import backstop
from rlenv.results import RolloutRecord
from rlenv.worker.config import RolloutTask

MAX_FINISHES = 32
"""Finish calls sent to a worker in one request, at most: the last of them waits for the
others' grading, as it would in the worker's queue anyway."""


@dataclass
class _Finishing:
    """One rollout's `finish` call waiting for a worker, or in a worker's batch (`taken`)."""

    task: RolloutTask
    args: tuple[Any, ...]
    timeout: float
    taken: bool = False
    done: bool = False
    record: RolloutRecord | None = None
    error: BaseException | None = None
    wake: asyncio.Future[None] | None = None  # set when it is answered, or is to lead a batch

    def answer(self, record: RolloutRecord | None, error: BaseException | None) -> None:
        self.record, self.error, self.done = record, error, True
        self.rouse()

    def rouse(self) -> None:
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)


class FinishQueue:
    """The finish calls of one `LocalExecutor` that wait for a worker, and who leads them."""

    def __init__(self, executor: Any) -> None:
        # the `LocalExecutor` whose workers it uses (typed Any: local.py imports this module,
        # and no import goes round a circle, not even one for types: tests/test_layers.py)
        self.executor = executor
        self.waiting: collections.deque[_Finishing] = collections.deque()  # not yet sent
        self.leaders = 0  # calls that took (or wait for) a worker for those waiting

    async def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
    ) -> RolloutRecord:
        """Grade a rollout: its record, or what its call raised (`WorkerLost`...)."""
        entry = _Finishing(task, (task, trajectory, model, timeout), timeout)
        self.waiting.append(entry)
        try:
            while not entry.done:
                if not entry.taken and self.leaders < self.executor.workers:
                    await self._lead()
                    continue
                entry.wake = asyncio.get_running_loop().create_future()
                await entry.wake
        finally:
            if not entry.taken:  # cancelled while it waited: nobody grades it now
                with contextlib.suppress(ValueError):
                    self.waiting.remove(entry)
        if entry.error is not None:
            raise entry.error
        assert entry.record is not None
        return entry.record

    def _hand_on(self) -> None:
        """Wake the first waiting finish call to lead the next batch, if a worker may take one."""
        if self.waiting and self.leaders < self.executor.workers:
            self.waiting[0].rouse()

    async def _lead(self) -> None:
        """Take an idle worker and send it the finish calls waiting then (up to
        `MAX_FINISHES`), in order; another waiting call leads the next batch."""
        self.leaders += 1
        try:
            # the other rollouts whose model replies this turn of the event loop read reach
            # their finish call before the batch is taken: one request (and one wake-up of
            # the worker) for all of them, where each had one of its own (before the worker
            # is taken: a call cancelled here holds none)
            await asyncio.sleep(0)
            slot = await self.executor._idle()
            batch: list[_Finishing] = []
            while self.waiting and len(batch) < MAX_FINISHES:
                entry = self.waiting.popleft()
                entry.taken = True
                batch.append(entry)
            if not batch:
                self.executor._release(slot, None)
                return
            self._hand_on()  # what is left over may go to another worker at once
            await self._batch(slot, batch)
        finally:
            self.leaders -= 1
            self._hand_on()

    async def _batch(self, slot: Any, batch: list[_Finishing]) -> None:
        """`batch` on one worker: each reply checked as its call's (`replies.checked`) and
        waited for no longer than its own limit; when the worker overruns or dies, the call it
        was in gets the `WorkerLost`, and the ones it did not reach wait for a worker again."""
        try:
            request = pickle.dumps(("finish_batch", ([entry.args for entry in batch],)))
        except Exception as exc:  # what cannot be sent is each call's error, not the worker's
            for entry in batch:
                entry.answer(None, exc)
            self.executor._release(slot, None)
            return
        replacement: Any = None
        answered = 0
        try:
            with contextlib.suppress(OSError):  # a dead worker: found below
                slot.connection.send_bytes(request)
            while answered < len(batch):
                entry = batch[answered]
                message = replies.checked(
                    "finish", await self.executor._answer(slot, backstop(entry.timeout)), entry.task
                )
                if message is None or message[0] not in ("ok", "raise"):
                    replacement, lost = await self.executor._lose(
                        slot, "finish", entry.timeout, message, entry.task
                    )
                    answered += 1
                    entry.answer(None, lost)
                    return
                answered += 1
                if message[0] == "ok":
                    entry.answer(message[1], None)
                else:
                    entry.answer(None, message[1])
        finally:
            left = batch[answered:]
            for entry in reversed(left):  # first in line again, in their order
                entry.taken = False
                self.waiting.appendleft(entry)
            if left and replacement is None and slot in self.executor.all:
                # left mid-batch (the run stopped): the worker is still grading the batch
                self.executor._unwatch(slot)
                await asyncio.get_running_loop().run_in_executor(
                    self.executor.threads, self.executor._stop, slot
                )
            else:
                self.executor._release(slot, replacement)
