"""Where rollouts execute, beyond one machine: Ray actors, one frozen world per actor process.

`RayExecutor` implements `rlenv.executors.base.Executor`, as `LocalExecutor` does; the runner
awaits each call's ObjectRef in its own event loop, so finished rollouts stream back in
completion order and the digest is the local executor's (every call is a pure function of the
task and the spec's files).

Each actor builds a `rlenv.worker.runtime.WorldRuntime` in its own Ray worker process, started
with the frozen environment variables (hash seed, TZ, locale) through the actor's `runtime_env`,
so the interpreter starts with them as a spawned local worker does. A rollout's calls (prepare,
every tool call, finish) go to the actor that prepared it, because its snapshot copy lives on that
actor's disk. Limits compared with the local executor:

- no fresh network or pid namespace: the actor must talk to its raylet, so outbound TCP is
  refused only by the in-process guard (`rlenv.world.netguard`; Ray's own sockets are C++,
  unguarded, and code that calls `_socket` or libc directly gets through), and other
  processes of the same user stay visible in /proc. The kernel socket filter
  (`rlenv.world.sockets`) still refuses AF_UNIX, UDP and raw sockets, on the thread that runs
  the actor's calls (Ray's own threads need theirs). The actor's environment is reset to the
  world's (`rlenv.world.environment`), and a Ray instance rlenv starts itself is started
  without the driver's secrets; the driver's own /proc/PID/environ (and that of the shell
  that started it) stays readable by same-user processes;
- files: no filesystem is shared. The driver packs the spec and every file its world reads
  (inputs, snapshot, cassettes, reward model, the env's python paths: `rlenv.executors.bundle`)
  into one tar in Ray's object store; each actor unpacks it into its own work root on its node
  and builds its world from there. Only rlenv itself must be installed in the nodes' Python, at
  the driver's version (checked at start); a path the spec gives as absolute must exist on every
  node. The grader cache of expensive verifiers is kept at the driver's cache path on each
  node (one cache per node unless that path is shared).

Limits (`limits.timeout_s`) are kept as locally: the in-actor alarm first, and past
`base.backstop(timeout)` the driver kills the actor (`ray.kill`; `ray.cancel(force=True)` is
refused for actor tasks, and `force=False` only raises KeyboardInterrupt, which env code can
swallow) and starts a fresh one on the same node with the same work root, so the other rollouts
prepared on it keep their snapshot copies; the call raises `WorkerLost` (`timeout`, or the error
status of the call for an actor that died). Unlike a local worker, an actor is not a subreaper:
processes that env code detached inside a killed actor are not hunted down.

The frozen clock does not reach Ray's machinery: the actor is synchronous (no event loop in its
process; calls run on its main thread, where the SIGALRM rollout timer works), and Ray's control
plane (heartbeats, gRPC, object transfer) is C++ and reads the real clock. Ray modules are
deliberately NOT put on freezegun's ignore list: freezegun decides by inspecting the five
callers' frames, and a tool called straight from an actor method has Ray's method executor as
its fifth caller, so the tool would read the real clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

from rlenv.agent import ToolOutcome, Trajectory
from rlenv.errors import RunFailed, UserError, WorkerLost
from rlenv.executors import bundle, replies
from rlenv.executors.base import CALLS, backstop, death_error, one_by_one
from rlenv.results import RolloutRecord
from rlenv.version import __version__
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask, WorkerConfig
from rlenv.worker.runtime import WorldChecksFailed
from rlenv.worker.timers import timeout_message
from rlenv.world.environment import (
    PLACE_VARIABLES,
    scrub_process_environment,
    world_environment,
)

INSTALL_HINT = "the ray executor needs Ray: pip install 'rlenv[ray]'"


def import_ray() -> Any:
    """Ray, or a UserError that names the extra to install."""
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return ray


NODE_VARIABLES = frozenset(
    {*PLACE_VARIABLES, "RLENV_CACHE_DIR"}  # cassette indexes: rebuilt where the path is not
)
"""World variables that name places on a machine: an actor keeps its own node's (the driver's
PATH or HOME may not exist there)."""


def forwarded_environment() -> dict[str, str]:
    """Variables every actor process starts with: the world's (`world_environment`: the
    frozen ones, the driver's RLENV_* switches such as RLENV_PERTURB_LISTING under
    `verify --perturb`, thread counts, secret-looking names as placeholders; never a secret),
    except the paths of `NODE_VARIABLES`, which are the node's. An actor inherits its raylet's
    environment too; it drops the rest when it starts (`WorldActor`)."""
    return {k: v for k, v in world_environment().items() if k not in NODE_VARIABLES}


@contextlib.contextmanager
def _without_secrets() -> Iterator[None]:
    """This process's environment reduced to the world's (plus Ray's own RAY_* settings) while
    a local Ray instance starts, so its raylet and workers never hold the driver's secrets."""
    saved = dict(os.environ)
    # Ray's own RAY_* settings, its cluster auth token included: without it no worker joins
    keep = {name: value for name, value in saved.items() if name.startswith("RAY_")}
    os.environ.clear()
    os.environ.update({**keep, **world_environment(saved)})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def preflight(address: str | None) -> None:
    """The user errors a Ray run can hit, checked before a run directory is created."""
    ray = import_ray()
    if address and not ray.is_initialized():
        check_reachable(address)


def check_reachable(address: str) -> None:
    """Fail fast on a cluster address nothing answers at (Ray itself retries for minutes)."""
    target = address.removeprefix("ray://")
    if address in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except (OSError, ValueError) as exc:
        raise UserError(f"--address {address}: no Ray cluster answers there ({exc})") from None


class WorldActor:
    """The body of one Ray actor: a frozen world, entered once, serving calls one at a time."""

    def __init__(
        self, config: WorkerConfig, env: bytes, spec: str, work_root: str | None = None
    ) -> None:
        self.error: str | None = None
        self.problems: list[dict[str, Any]] | None = None
        self.work_root: Path | None = None
        self.spec_path: str | None = None
        try:
            self._start(config, env, spec, work_root)
        except Exception as exc:  # reported by ready() as one line, not a remote traceback
            self.error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, WorldChecksFailed):
                self.problems = exc.problems

    def _start(self, config: WorkerConfig, env: bytes, spec: str, work_root: str | None) -> None:
        if work_root is not None:  # a replacement takes over a killed actor's snapshot copies
            self.work_root = Path(work_root)
            self.work_root.mkdir(parents=True, exist_ok=True)
        else:
            # A private work root per actor: the driver's work root exists only on its machine.
            shared = Path(config.work_root)
            parent = shared if shared.is_dir() else Path(tempfile.gettempdir())
            self.work_root = Path(tempfile.mkdtemp(prefix="ray-actor-", dir=parent))
        # the env as the driver packed it, never the driver's paths (which may not exist here);
        # beside the rollouts' workdirs (named INPUT-ROLLOUT), removed with them
        self.spec_path = str(bundle.unpack(env, spec, self.work_root / "env"))
        scrub_process_environment(world_environment())
        config = dataclasses.replace(
            config, spec_path=self.spec_path, work_root=str(self.work_root), thread_filter=True
        )
        protocol.init_worker(config, whole_process=False)

    def ready(self) -> dict[str, Any]:
        """What the driver checks before dispatching: a start error, rlenv and Python versions,
        and where a replacement must start (node id, work root)."""
        import ray

        return {
            "error": self.error,
            "problems": self.problems,
            "node": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "work_root": str(self.work_root) if self.work_root else None,
            "spec": self.spec_path,
            "rlenv": __version__,
            "python": list(sys.version_info[:2]),
        }

    def run_rollout(self, task: RolloutTask) -> RolloutRecord:
        return protocol.handle("run_rollout", task)

    def prepare(self, task: RolloutTask) -> None:
        protocol.handle("prepare", task)

    def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
    ) -> ToolOutcome:
        return protocol.handle("tool", task, call, turn, number, timeout)

    def user(
        self, task: RolloutTask, messages: list[dict[str, Any]], user_turn: int, timeout: float
    ) -> str | None:
        return protocol.handle("user", task, messages, user_turn, timeout)  # type: ignore[no-any-return]

    def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
    ) -> RolloutRecord:
        return protocol.handle("finish", task, trajectory, model, timeout)

    def grade(self, record: RolloutRecord, timeout: float) -> tuple[RolloutRecord, int, int]:
        return protocol.handle("grade", record, timeout)

    def shutdown(self) -> None:
        if self.work_root is not None:
            shutil.rmtree(self.work_root, ignore_errors=True)


class RayExecutor:
    """`workers` WorldActors on a Ray cluster; rollouts go to the least busy actor."""

    def __init__(self, config: WorkerConfig, workers: int, address: str | None = None) -> None:
        ray = import_ray()
        self._ray = ray
        self.started_ray = False
        # a Ray connection this process already holds is used as it is, whatever `address` says
        if not ray.is_initialized():
            if address:
                check_reachable(address)
            try:
                with _without_secrets():
                    ray.init(
                        address=address or None,
                        include_dashboard=False,
                        log_to_driver=False,  # a tool's prints must not reach `rlenv run --json`
                        logging_level="WARNING",
                    )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"--address {address}" if address else "local Ray instance"
                raise UserError(f"{where}: cannot start or reach Ray: {exc}") from None
            self.started_ray = True
        self.actors: list[Any] = []
        self.env: Any = None
        try:
            packed = bundle.build(config.spec_path)
            self.spec_member = packed.spec
            self.env = ray.put(packed.data)  # once; every actor (and replacement) fetches it
            self._start_actors(config, workers)
        except BaseException:
            self.close()
            raise

    def _start_actors(self, config: WorkerConfig, workers: int) -> None:
        ray = self._ray
        # one CPU reserved per actor; more actors than the cluster has CPUs would never start
        capacity = int(ray.cluster_resources().get("CPU", 1)) or 1
        count = max(1, min(workers, capacity))
        self.config = config
        self.actor_class = ray.remote(num_cpus=1, max_restarts=0)(WorldActor)
        options = {
            "runtime_env": {"env_vars": forwarded_environment()},
            "scheduling_strategy": "SPREAD",
        }
        self.actors = [
            self.actor_class.options(**options).remote(config, self.env, self.spec_member)
            for _ in range(count)
        ]
        self.busy = [0] * count
        self.locks: list[asyncio.Lock] | None = None
        self.assigned: dict[tuple[int, int], int] = {}
        try:
            states = ray.get([actor.ready.remote() for actor in self.actors])
        except ray.exceptions.RayError as exc:
            raise RunFailed(f"frozen-world worker failed to start: {exc}") from None
        self.states = states
        self._check_states(states)

    def _check_states(self, states: list[dict[str, Any]]) -> None:
        for state in states:
            if state.get("problems") and self.config.world_checks:
                raise self._problems(state)
            if state["error"]:
                raise RunFailed(
                    f"frozen-world worker failed to start on {state['node']}: {state['error']}"
                )
            if state["rlenv"] != __version__ or state["python"] != list(sys.version_info[:2]):
                raise RunFailed(
                    f"Ray node {state['node']} runs rlenv {state['rlenv']} on Python"
                    f" {'.'.join(map(str, state['python']))}; this driver runs rlenv {__version__}"
                    f" on Python {sys.version_info[0]}.{sys.version_info[1]}: install the same"
                    " on every node"
                )

    def _problems(self, state: dict[str, Any]) -> UserError:
        """What the env's checks found in an actor, its places named by the driver's spec
        path (the actor's is its unpacked copy's)."""
        from rlenv.env import reported_problems

        unpacked, ours = state.get("spec") or "", self.config.spec_path
        problems = [
            {**item, "where": item["where"].replace(unpacked, ours, 1)}
            if isinstance(item, dict) and isinstance(item.get("where"), str) and unpacked
            else item
            for item in state["problems"]
        ]
        return reported_problems(problems, (self.config.world_checks or {})["purpose"])

    @property
    def workers(self) -> int:
        return len(self.actors)

    def _pick(self) -> int:
        return min(range(len(self.actors)), key=lambda index: (self.busy[index], index))

    async def _replace(self, index: int) -> None:
        """Kill actor `index` and start a fresh one on its node, over its work root."""
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray.kill(self.actors[index], no_restart=True)
        state = self.states[index]
        options = {
            "runtime_env": {"env_vars": forwarded_environment()},
            "scheduling_strategy": NodeAffinitySchedulingStrategy(state["node_id"], soft=False),
        }
        actor = self.actor_class.options(**options).remote(
            self.config, self.env, self.spec_member, state["work_root"]
        )
        self.actors[index] = actor
        try:
            fresh = await actor.ready.remote()
        except ray.exceptions.RayError as exc:
            raise RunFailed(f"frozen-world worker failed to restart: {exc}") from None
        self._check_states([fresh])
        self.states[index] = fresh

    async def _call(self, index: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        ray = self._ray
        if self.locks is None:  # made in the running loop
            self.locks = [asyncio.Lock() for _ in self.actors]
        task = args[0] if args and isinstance(args[0], RolloutTask) else None
        try:
            # one call at a time per actor, so the limit measures the call, not its queue
            async with self.locks[index]:
                try:
                    reply = getattr(self.actors[index], method).remote(*args)
                    if timeout is None:
                        message: tuple[str, Any] = ("ok", await reply)
                    else:
                        message = ("ok", await asyncio.wait_for(reply, backstop(timeout)))
                except TimeoutError:
                    await self._replace(index)
                    error = timeout_message(timeout or 0)
                    raise WorkerLost("timeout", error) from None
                except ray.exceptions.RayActorError:
                    await self._replace(index)
                    # a dead actor's phase and exit code are not known here: the call's
                    status, where = CALLS[method]
                    raise WorkerLost(status, death_error(where)) from None
                except ray.exceptions.RayTaskError as exc:
                    # the worker's own exception (FixtureMiss, RolloutTimeout...), as a local
                    # worker raises it, without Ray's remote traceback in its message
                    cause = exc.cause
                    if not isinstance(cause, Exception) or isinstance(
                        cause, ray.exceptions.RayError
                    ):
                        raise RunFailed(f"a frozen-world worker failed: {exc}") from None
                    message = ("raise", cause)
                # in-world code in the actor can change its own reply: what is not the call's
                # reply (bounded data of the right shape) is the rollout's error, as locally
                problem = replies.reply_problem(method, message, task)
                if problem is not None:
                    await self._replace(index)
                    status, where = CALLS[method]
                    error = f"the worker process sent something that is not a reply in the {where}"
                    raise WorkerLost(status, f"{error}: {problem}") from None
        except ray.exceptions.RayError as exc:
            raise RunFailed(f"a frozen-world worker died: {exc}") from None
        if message[0] == "raise":
            raise message[1] from None
        return message[1]

    async def run_rollout(self, task: RolloutTask, timeout: float) -> RolloutRecord:
        index = self._pick()
        self.busy[index] += 1
        try:
            return await self._call(index, "run_rollout", task, timeout=timeout)
        finally:
            self.busy[index] -= 1

    def run_batch(
        self, tasks: list[RolloutTask], timeout: float
    ) -> AsyncGenerator[tuple[RolloutTask, RolloutRecord | WorkerLost | None], None]:
        return one_by_one(self, tasks, timeout)

    async def prepare(self, task: RolloutTask) -> None:
        index = self._pick()
        self.busy[index] += 1
        self.assigned[(task.input_index, task.rollout)] = index
        await self._call(index, "prepare", task)

    def _owner(self, task: RolloutTask) -> int:
        index = self.assigned.get((task.input_index, task.rollout))
        if index is None:
            raise RuntimeError(f"rollout {task} was not prepared on this executor")
        return index

    async def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
    ) -> ToolOutcome:
        index = self._owner(task)
        try:
            args = (task, call, turn, number, timeout)
            return await self._call(index, "tool", *args, timeout=timeout)
        except WorkerLost:  # the rollout ends here: finish is never called
            del self.assigned[(task.input_index, task.rollout)]
            self.busy[index] -= 1
            raise

    async def user(
        self, task: RolloutTask, messages: list[dict[str, Any]], user_turn: int, timeout: float
    ) -> str | None:
        index = self._owner(task)
        try:
            args = (task, messages, user_turn, timeout)
            return await self._call(index, "user", *args, timeout=timeout)  # type: ignore[no-any-return]
        except WorkerLost:  # the rollout ends here: finish is never called
            del self.assigned[(task.input_index, task.rollout)]
            self.busy[index] -= 1
            raise

    async def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
    ) -> RolloutRecord:
        index = self._owner(task)
        try:
            args = (task, trajectory, model, timeout)
            return await self._call(index, "finish", *args, timeout=timeout)
        finally:
            del self.assigned[(task.input_index, task.rollout)]
            self.busy[index] -= 1

    async def grade(self, record: RolloutRecord, timeout: float) -> tuple[RolloutRecord, int, int]:
        index = self._pick()
        self.busy[index] += 1
        try:
            return await self._call(index, "grade", record, timeout, timeout=timeout)
        finally:
            self.busy[index] -= 1

    def close(self) -> None:
        """Remove the actors' work roots, kill the actors, stop Ray if this executor started it."""
        ray = self._ray
        if self.actors:
            # a dead actor has nothing left to clean up on a live node
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get([actor.shutdown.remote() for actor in self.actors], timeout=30)
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []
        self.env = None  # the object store frees the bundle once no reference is left
        if self.started_ray:
            self.started_ray = False
            ray.shutdown()
