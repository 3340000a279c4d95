"""Where rollouts execute on this machine: a pool of spawned frozen-world worker processes,
each exec'd with only the world's environment variables (`rlenv.world.environment`), in fresh
network and pid namespaces when they can be made.

Each worker is a process of our own with one pipe (not a `ProcessPoolExecutor`, which can
neither kill one busy worker nor survive one dying): the orchestrator knows which worker runs
which call, waits for its answer no longer than the call's limit (`base.backstop`), and then
stops and kills the worker with every process under it (`rlenv.world.reaper.kill_tree`) and
starts a fresh one in its place. A worker that dies under a call (`os._exit`, a segfault, a
SIGKILL) is replaced the same way. Either way the call raises `WorkerLost` with the rollout's
status: `timeout`, or the error status of the phase the worker was in (it keeps its phase in
memory shared with the orchestrator).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import multiprocessing
import os
import pickle
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.agent import ToolOutcome, Trajectory
from rlenv.errors import RunFailed, WorkerLost
from rlenv.executors import replies, wire
from rlenv.executors.base import CALLS, START_TIMEOUT_S, backstop, death_error
from rlenv.executors.finishes import FinishQueue
from rlenv.executors.spawning import no_tracker, prefixed, spawn_with, without_main
from rlenv.results import RolloutRecord
from rlenv.worker import protocol, timers
from rlenv.worker.config import RolloutTask, WorkerConfig
from rlenv.world.environment import world_environment
from rlenv.world.freeze import FROZEN_ENV
from rlenv.world.netguard import netns_prefix
from rlenv.world.reaper import kill_tree

_SPAWN_LOCK = threading.Lock()
"""Held while a worker is spawned: the frozen variables go into os.environ and spawn's
executable is swapped for that moment, and a run in another thread (the TRL callback
evaluating in the background) must not spawn in between."""


@dataclass
class _Worker:
    process: Any  # multiprocessing.Process (spawn context)
    connection: Any  # the orchestrator's end of the worker's pipe
    phase: Any  # multiprocessing.RawValue("i"): the worker's current phase
    # bytes read from the pipe and not yet a whole message; whole messages not yet taken
    unread: bytearray = field(default_factory=bytearray)
    messages: collections.deque[tuple[str, Any]] = field(default_factory=collections.deque)
    watched: Any = None  # the event loop that reads the pipe as it becomes readable
    waiter: Any = None  # the future a call waiting for the next message awaits
    ended: str | None = None  # "dead": the pipe closed; "unsafe": it carried what is not data


def world_command(spec_time: str, work_root: str, live_tools: bool) -> _Command:
    """How a worker is started: the command (ending with the interpreter) and its whole
    environment (None: the orchestrator's), for a spec whose instant is `spec_time` (ISO
    8601). The worker interpreter is started through no script (one in a place a rollout may
    write ran with the orchestrator's keys: issue 26) and, outside recording, with only the
    world's variables from its first exec on (`spawn_with`): no OPENAI_API_KEY, no secret
    the orchestrator holds. Recording is the exception: its tools call the live APIs with the
    user's keys. -P: a module in the cwd never shadows what the worker imports (rlenv,
    multiprocessing)."""
    command: list[str] = []
    environment: dict[str, str] | None = None
    if not live_tools:
        world = _with_frozen_clock(world_environment(), spec_time)
        world.update(protocol.ALLOCATOR_VARIABLES)  # the worker's alone (`protocol.serve`)
        prefix = netns_prefix()
        scratch = _private_scratch(prefix, work_root)
        preload = world.pop("LD_PRELOAD", None) if scratch else None
        variables = sorted(world.items())
        environment = dict(variables)
        env = shutil.which("env") or "/usr/bin/env"
        command = [env, "-i", *(f"{name}={value}" for name, value in variables)]
        command += prefix + scratch
        if preload is not None:  # libfaketime for the worker only, whose shm is its own
            command += ["env", f"LD_PRELOAD={preload}"]
    return _Command([*command, sys.executable, "-P"], environment)


@dataclass(frozen=True)
class _Command:
    argv: list[str]
    environment: dict[str, str] | None


def _with_frozen_clock(variables: dict[str, str], spec_time: str) -> dict[str, str]:
    """The world's variables plus libfaketime's at the spec's instant: the worker's clock
    below Python (C code, a new file's times, SQLite, NumPy) reads the spec's instant too;
    freezegun keeps Python's view. Only the realtime clock is faked, so the worker's timers
    and pipes keep working. Recording is left on the real clock (its tools reach live APIs,
    whose TLS certificates are checked against it)."""
    from rlenv.sandbox import faketime_env

    clock = faketime_env(spec_time, "UTC")
    if clock and variables.get("PYTHONPATH"):
        clock["PYTHONPATH"] += os.pathsep + variables["PYTHONPATH"]
    return {**variables, **clock}


def _private_scratch(prefix: list[str], work_root: str) -> list[str]:
    """The command that gives a worker its own empty /dev/shm (a tmpfs in the mount namespace
    `--mount-proc` made), so a file one worker's rollout leaves there (and libfaketime's
    ``faketime_shm_*``) is not another worker's to read; the worker empties it after each
    rollout (`rlenv.worker.protocol`). [] when the worker has no mount namespace, or its work
    root is in /dev/shm (`verify --perturb`); a mount that fails leaves the host's /dev/shm
    (and the worker, not finding its mount, empties nothing)."""
    mount = shutil.which("mount")
    if "--mount-proc" not in prefix or mount is None or not Path("/dev/shm").is_dir():
        return []
    if Path(work_root).resolve().is_relative_to("/dev/shm"):
        return []
    options = "mode=1777,nosuid,nodev,size=256m"
    script = (
        f"{shlex.quote(mount)} -t tmpfs -o {options} {protocol.SCRATCH_SOURCE} /dev/shm"
        ' 2>/dev/null; exec "$@"'
    )
    return ["/bin/sh", "-c", script, "sh"]


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class LocalExecutor:
    """Spawned worker processes, each entering the frozen world once at start."""

    def __init__(
        self, config: WorkerConfig, workers: int, early: LocalExecutor | None = None
    ) -> None:
        """`early`: workers started before `config` was made (`LocalExecutor.early`), taken
        over and given it when they were started alike; else let go, and workers started."""
        self.workers = max(1, workers)
        from rlenv.spec import load_spec
        from rlenv.spec_data import as_data

        # workers die with us; the spec is loaded here once and sent to each worker as data:
        # records (`rlenv.spec_data`), which the worker reads without importing pydantic
        self.config = dataclasses.replace(
            config, parent_pid=os.getpid(), loaded_spec=as_data(load_spec(config.spec_path))
        )
        assert self.config.loaded_spec is not None
        self.given: WorkerConfig | None = self.config  # what a worker is started with
        self.context = multiprocessing.get_context("spawn")
        spec_time = self.config.loaded_spec.spec.time.isoformat()
        self.command = world_command(spec_time, config.work_root, config.live_tools)
        self._pool()
        try:
            started = self._take(early) if early is not None else []
            started += [self._start() for _ in range(self.workers - len(started))]
            deadline = time.monotonic() + START_TIMEOUT_S
            for slot in started:
                self._check_started(slot, self._receive(slot, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise
        self.free = started

    def _pool(self) -> None:
        # starting and stopping workers happens in threads, so the event loop never blocks on
        # one (a call's answer is awaited on the loop itself: `_answer`)
        self.threads = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="rlenv-w")
        self.all: list[_Worker] = []
        self.idle: asyncio.Queue[_Worker] | None = None
        self.finishes = FinishQueue(self)

    @classmethod
    def early(cls, spec_time: str, work_root: str, workers: int) -> LocalExecutor:
        """`workers` workers started before the run's config exists, for a spec whose instant
        is `spec_time`: each starts its interpreter and imports the world's code (~0.3 s of
        CPU), then waits for its config (`protocol.serve`), while the orchestrator loads the
        env. A `LocalExecutor` made with them as `early` takes them over; `let_go` kills the
        rest."""
        self = cls.__new__(cls)
        self.workers = max(1, workers)
        self.given = None  # `protocol.serve` waits for it
        self.context = multiprocessing.get_context("spawn")
        self.command = world_command(spec_time, work_root, False)
        self._pool()
        try:
            self.free = [self._start() for _ in range(self.workers)]
        except BaseException:
            self.close()
            raise
        return self

    def _take(self, early: LocalExecutor) -> list[_Worker]:
        """Up to `self.workers` of `early`'s workers, given this run's config, when they were
        started as this run's would be (same command, same variables); none else. `early` is
        closed: what this executor did not take is stopped."""
        taken: list[_Worker] = []
        try:
            if early.command == self.command:
                for slot in early.free[: self.workers]:
                    try:
                        slot.connection.send(self.config)
                    except OSError:
                        break  # a worker that died waiting: found dead, or started anew
                    early.all.remove(slot)
                    self.all.append(slot)
                    taken.append(slot)
        finally:
            early.let_go()
        return taken

    def let_go(self) -> None:
        """Kill every worker at once and everything under it (workers started early that no
        run took: nothing of theirs to wait for)."""
        for slot in list(self.all):
            self._stop(slot)
        self.threads.shutdown(wait=False, cancel_futures=True)

    # -- workers ------------------------------------------------------------------------------

    def _start(self) -> _Worker:
        """Spawn one worker (from this thread: the parent-death signal follows the thread that
        forked it) with the frozen environment variables and, when possible, its own network
        namespace (through `self.command`, whose parts exec: the pid stays the worker's)."""

        phase = self.context.RawValue("i", 0)
        ours, theirs = self.context.Pipe(duplex=True)
        process = self.context.Process(  # no config yet: an early worker, sent it later
            target=protocol.serve, args=(theirs, self.given, phase), name="rlenv-worker"
        )
        with _SPAWN_LOCK:  # os.environ and spawn's globals are the process's: one at a time
            process = self._spawn(process)
        theirs.close()
        slot = _Worker(process, ours, phase)
        self.all.append(slot)
        return slot

    def _spawn(self, process: Any) -> Any:
        from multiprocessing import resource_tracker, spawn, util

        saved = {key: os.environ.get(key) for key in FROZEN_ENV}
        os.environ.update(FROZEN_ENV)  # inherited by the spawned interpreter (hash seed!)
        previous_executable = spawn.get_executable()
        command_line, spawnv = spawn.get_command_line, util.spawnv_passfds
        spawn.set_executable(self.command.argv[0])
        spawn.get_command_line = prefixed(command_line, self.command.argv)
        if self.command.environment is not None:
            util.spawnv_passfds = spawn_with(self.command.environment)
        preparation = spawn.get_preparation_data
        spawn.get_preparation_data = without_main(preparation)  # type: ignore[assignment]
        tracker = resource_tracker.getfd
        resource_tracker.getfd = no_tracker  # type: ignore[assignment]
        try:
            process.start()
        finally:
            resource_tracker.getfd = tracker  # type: ignore[assignment]
            spawn.get_preparation_data = preparation  # type: ignore[assignment]
            spawn.get_command_line = command_line
            util.spawnv_passfds = spawnv
            spawn.set_executable(previous_executable)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        return process

    @staticmethod
    def _receive(slot: _Worker, timeout: float | None) -> tuple[str, Any] | None:
        """The worker's next message, waited for in a thread (a worker starting); ("dead",
        None) when its pipe closed, ("unsafe", None) when it carried what is not a reply
        (`rlenv.executors.wire`); None when `timeout` seconds passed first."""
        try:
            if slot.connection.poll(None if timeout is None else max(timeout, 0)):
                return LocalExecutor._message(slot.connection.recv_bytes())
        except Exception:  # EOFError, OSError
            return ("dead", None)
        return None

    @staticmethod
    def _message(data: bytes) -> tuple[str, Any]:
        try:
            message = wire.loads(data)
        except Exception:  # a torn pickle, or one naming what a reply never holds
            return ("unsafe", None)
        if isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], str):
            return message
        return ("unsafe", None)

    async def _answer(self, slot: _Worker, timeout: float | None) -> tuple[str, Any] | None:
        """The worker's next message (None: `timeout` seconds passed first). The pipe is
        watched by the event loop for the worker's life and read in one go whenever it is
        readable, cut into messages (`_readable`): a poll and a read per message, and a
        reader added and removed per wait, cost the orchestrator as much as a rollout."""
        self._watch(slot)
        if not slot.messages and slot.ended is None:
            loop = asyncio.get_running_loop()
            slot.waiter = waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                slot.waiter = None
                if timer is not None:
                    timer.cancel()
        if slot.messages:
            return slot.messages.popleft()
        if slot.ended is not None:
            return (slot.ended, None)
        return None

    def _watch(self, slot: _Worker) -> None:
        loop = asyncio.get_running_loop()
        if slot.watched is not loop and slot.ended is None:
            slot.watched = loop
            loop.add_reader(slot.connection.fileno(), self._readable, slot)

    def _unwatch(self, slot: _Worker) -> None:
        if slot.watched is not None:
            with contextlib.suppress(Exception):  # the loop may be closed already
                slot.watched.remove_reader(slot.connection.fileno())
            slot.watched = None

    def _readable(self, slot: _Worker) -> None:
        """What the pipe holds, read at once; whole messages queued, the waiter woken."""
        try:
            chunk = os.read(slot.connection.fileno(), 1 << 20)
        except OSError:
            chunk = b""
        if not chunk:  # the worker's end closed
            slot.ended = "dead"
        else:
            slot.unread += chunk
            try:
                slot.messages.extend(self._message(data) for data in wire.frames(slot.unread))
            except wire.UnsafeMessage:
                slot.ended = "unsafe"
        if slot.ended is not None:
            self._unwatch(slot)
        waiter = slot.waiter
        if waiter is not None and not waiter.done() and (slot.messages or slot.ended):
            waiter.set_result(None)

    def _check_started(self, slot: _Worker, message: tuple[str, Any] | None) -> None:
        if message is not None and message[0] == "problems" and self.config.world_checks:
            from rlenv.env import reported_problems

            raise reported_problems(message[1], self.config.world_checks["purpose"])
        if message is not None and message[0] == "unsafe":  # env code wrote to the pipe
            raise RunFailed(
                "frozen-world worker failed to start: it sent something that is not a message"
                " of a worker (env code writing to its pipe while the env was loaded)"
            )
        if message is None or message[0] != "ready":
            why = message[1] if message and message[0] == "error" else self._death(slot)
            raise RunFailed(f"frozen-world worker failed to start: {why}")

    def _stop(self, slot: _Worker) -> None:
        """Stop and kill the worker and every process under it; forget it."""
        if slot.process.pid is not None:
            kill_tree({slot.process.pid})
        slot.process.join(timeout=10)
        slot.connection.close()
        if slot in self.all:
            self.all.remove(slot)

    def _death(self, slot: _Worker) -> str:
        slot.process.join(timeout=5)
        code = slot.process.exitcode
        if code is None:
            return "no answer"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    async def _replacement(self) -> _Worker:
        slot = self._start()
        loop = asyncio.get_running_loop()
        message = await loop.run_in_executor(self.threads, self._receive, slot, START_TIMEOUT_S)
        try:
            self._check_started(slot, message)
        except RunFailed:
            self._stop(slot)
            raise
        return slot

    # -- calls ----------------------------------------------------------------------------

    async def _idle(self) -> _Worker:
        if self.idle is None:  # made in the running loop
            self.idle = asyncio.Queue()
            for slot in self.free:
                self.idle.put_nowait(slot)
        return await self.idle.get()

    def _release(self, slot: _Worker, replacement: _Worker | None) -> None:
        assert self.idle is not None
        survivor = replacement if replacement is not None else slot
        if survivor in self.all:
            self.idle.put_nowait(survivor)

    async def _lose(
        self,
        slot: _Worker,
        name: str,
        timeout: float | None,
        message: tuple[str, Any] | None,
        task: RolloutTask | None,
    ) -> tuple[_Worker, WorkerLost]:
        """The worker overran (`message` None: no answer within the limit) or died under
        `name`: it goes (with what it left of `task`'s workdir) and a fresh one comes; what
        the rollout's record says about it."""
        phase = timers.phase_of(slot.phase)
        if message is None:
            status, error = "timeout", timers.timeout_message(timeout or 0)
        else:
            status, where = CALLS[name]
            if message[0] in ("dead", "ready", "error", "died"):
                if phase in timers.PHASE_STATUS:
                    status, where = timers.PHASE_STATUS[phase], phase
                # "died": the call's child process (`rlenv.worker.isolate`), as the worker says
                died = message[0] == "died" and isinstance(message[1], str)
                error = death_error(where, message[1][:200] if died else self._death(slot))
            else:  # alive, but what it sent is not a reply: in-world code wrote to the pipe
                # (the call's own status: the worker has moved on, its phase says nothing)
                error = f"the worker process sent something that is not a reply in the {where}"
                if isinstance(message[1], str):  # what it was (`rlenv.executors.replies`)
                    error += f": {message[1]}"
        loop = asyncio.get_running_loop()
        self._unwatch(slot)
        await loop.run_in_executor(self.threads, self._stop, slot)
        if task is not None:  # the rollout's snapshot copy, if the worker left it
            workdir = Path(self.config.work_root) / f"{task.input_index}-{task.rollout}"
            shutil.rmtree(workdir, ignore_errors=True)
        return await self._replacement(), WorkerLost(status, error)

    async def _call(
        self, name: str, args: tuple[Any, ...], timeout: float | None, task: RolloutTask | None
    ) -> Any:
        """Run `name` on an idle worker; kill and replace it if it overruns or dies."""
        slot = await self._idle()
        replacement: _Worker | None = None
        try:
            with contextlib.suppress(OSError):  # a dead worker: found below
                # pickled here, not by `Connection.send`: its ForkingPickler copies a table of
                # reducers per message (for descriptors and sockets, which a call never holds)
                slot.connection.send_bytes(pickle.dumps((name, args)))
            limit = backstop(timeout) if timeout is not None else None
            message = replies.checked(name, await self._answer(slot, limit), task)
            if message is not None and message[0] == "ok":
                return message[1]
            if message is not None and message[0] == "raise":
                raise message[1]
            replacement, lost = await self._lose(slot, name, timeout, message, task)
            raise lost
        finally:
            self._release(slot, replacement)

    async def run_batch(
        self, tasks: list[RolloutTask], timeout: float
    ) -> AsyncGenerator[tuple[RolloutTask, RolloutRecord | WorkerLost | None], None]:
        """Whole rollouts on one worker, sent in one request and answered one by one (see
        `rlenv.worker.protocol`). Yields (task, record); when the worker overruns or dies,
        (task, WorkerLost) for the rollout it was in (the first not answered: each rollout is
        limited on its own) and (task, None) for each one it did not reach, to run again."""
        slot = await self._idle()
        replacement: _Worker | None = None
        answered = 0
        try:
            with contextlib.suppress(OSError):  # a dead worker: found below
                slot.connection.send(("run_batch", (tasks,)))
            while answered < len(tasks):
                message = replies.checked(
                    "run_rollout", await self._answer(slot, backstop(timeout)), tasks[answered]
                )
                if message is not None and message[0] in ("ok", "raise"):
                    task = tasks[answered]
                    answered += 1
                    if message[0] == "raise":
                        raise message[1]
                    yield task, message[1]
                    continue
                task = tasks[answered]
                replacement, lost = await self._lose(slot, "run_rollout", timeout, message, task)
                yield task, lost
                for task in tasks[answered + 1 :]:
                    yield task, None
                return
            message = await self._answer(slot, backstop(timeout))
            if message is None or message[0] != "done":  # died on its way out
                replacement, _ = await self._lose(slot, "run_rollout", timeout, message, None)
        finally:
            if answered < len(tasks) and replacement is None and slot in self.all:
                # left mid-batch (an exception, or the run stopped): the worker is still
                # running the batch's other rollouts, so it is of no use to anyone
                self._unwatch(slot)
                await asyncio.get_running_loop().run_in_executor(self.threads, self._stop, slot)
            else:
                self._release(slot, replacement)

    async def run_rollout(self, task: RolloutTask, timeout: float) -> RolloutRecord:
        return await self._call("run_rollout", (task,), timeout, task)  # type: ignore[no-any-return]

    async def prepare(self, task: RolloutTask) -> None:
        if not self.config.empty_workdir:  # else the worker makes it at the first call
            await self._call("prepare", (task,), None, task)

    async def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
    ) -> ToolOutcome:
        args = (task, call, turn, number, timeout)
        return await self._call("tool", args, timeout, task)  # type: ignore[no-any-return]

    async def user(
        self, task: RolloutTask, messages: list[dict[str, Any]], user_turn: int, timeout: float
    ) -> str | None:
        args = (task, messages, user_turn, timeout)
        return await self._call("user", args, timeout, task)  # type: ignore[no-any-return]

    async def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
    ) -> RolloutRecord:
        """Grade a rollout, in one request with the others waiting for a worker then
        (`rlenv.executors.finishes`)."""
        return await self.finishes.finish(task, trajectory, model, timeout)

    async def grade(self, record: RolloutRecord, timeout: float) -> tuple[RolloutRecord, int, int]:
        return await self._call("grade", (record, timeout), timeout, None)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Ask every worker to stop; kill what does not (and everything under it)."""
        for slot in list(self.all):
            with contextlib.suppress(OSError):
                slot.connection.send(None)
        deadline = time.monotonic() + 10
        for slot in list(self.all):
            slot.process.join(timeout=max(0.0, deadline - time.monotonic()))
            self._stop(slot)
        self.threads.shutdown(wait=False, cancel_futures=True)
