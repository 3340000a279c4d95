"""Where rollouts execute, beyond one machine: Ray actors, each the host of one isolated
local worker.

`RayExecutor` implements `rlenv.executors.base.Executor`, as `LocalExecutor` does; the runner
awaits each call's ObjectRef in its own event loop, so finished rollouts stream back in
completion order and the digest is the local executor's (every call is a pure function of the
task and the spec's files).

An actor (`WorldActor`) runs no env code. It unpacks the env the driver packed on its node
and starts a `rlenv.executors.local.LocalExecutor` with one worker over its own work root;
every call (a whole rollout, prepare, a tool call, a user turn, finish, grade) is forwarded
to that executor. So the world in an actor is a local worker's, made the same way: exec'd
through `env -i` with the world's variables only, in fresh network, pid, IPC and mount
namespaces where the node can make them, its own /tmp, /var/tmp, $HOME and /dev/shm, every
other mount read-only, the work root shown as the call's workdir only, libfaketime below
Python, and one capability-less fork per rollout (or tool call), so nothing a rollout leaves
in the worker's process state, files or the kernel reaches the next rollout the actor serves
(`tests/test_ray_channels.py` runs the channel catalog on Ray). A rollout's calls go to the
actor that prepared it, because its snapshot copy lives on that actor's disk.

Limits (`limits.timeout_s`) are the local executor's, applied in the actor: the worker's
alarm first, then past `base.backstop(timeout)` the actor's executor kills the worker (with
everything under it) and starts another, and the call arrives at the driver as the same
`WorkerLost` a local run raises (`_Lost` carries it through Ray); a worker's own exceptions
(FixtureMiss, RunFailed...) arrive as they are (`RayTaskError.cause`). The driver waits
longer (`base.host_backstop`: the inner backstop plus a replacement's start), so it acts only
on an actor that itself stops answering: it kills it (`ray.kill`; `ray.cancel(force=True)` is
refused for actor tasks) and starts a fresh one on the same node over the same work root, so
the other rollouts prepared there keep their snapshot copies. An actor that dies (its node,
the OOM killer) is replaced the same way; its rollout gets the call's error status (its
phase and exit code are not known to the driver). The actor's workers die with it.

Still different from the local executor:

- `summary.json`'s ``network_guard`` says ``python``, the floor on any node: the driver cannot
  know whether every node can make a network namespace (an actor's worker gets one where its
  node can, as a local worker does where this machine can);
- files: no filesystem is shared. The driver packs the spec and every file its world reads
  (inputs, snapshot, cassettes, reward model, the env's python paths: `rlenv.executors.bundle`)
  into one tar in Ray's object store; each actor unpacks it beside its work root on its node
  and its worker builds the world from there. Only rlenv itself must be installed in the
  nodes' Python, at the driver's version (checked at start); a path the spec gives as
  absolute must exist on every node, and PATH, HOME and cache paths are the node's
  (`NODE_VARIABLES`). The grader cache of expensive verifiers is kept at the driver's cache
  path on each node (one cache per node unless that path is shared);
- the actor process holds its raylet's environment (a Ray instance rlenv starts itself is
  started without the driver's secrets); its worker gets only the world's variables.
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
from rlenv.executors.base import CALLS, death_error, host_backstop, one_by_one
from rlenv.results import RolloutRecord
from rlenv.version import __version__
from rlenv.worker.config import RolloutTask, WorkerConfig
from rlenv.worker.timers import timeout_message
from rlenv.world.environment import PLACE_VARIABLES, world_environment

INSTALL_HINT = "the ray executor needs Ray: pip install 'rlenv[ray]'"
STARTING = "frozen-world worker failed to start: "
"""How a local executor's start error begins (an actor's is told with its node)."""


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
    environment too; its worker is exec'd with the world's variables of the actor's
    environment only (`rlenv.executors.local`), so the rest never reaches env code."""
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


@dataclasses.dataclass(frozen=True)
class _Lost:
    """What an actor returns for a call its local executor lost (`WorkerLost`: the worker
    overran and was killed, or died): the driver raises it as the local executor would.
    A value, not the exception, because WorkerLost does not survive Ray's pickling."""

    status: str
    error: str


class WorldActor:
    """The body of one Ray actor: a host, on its node, for a local executor
    (`rlenv.executors.local.LocalExecutor`) with one isolated worker over the actor's work
    root. No env code runs in the actor; each call is forwarded to that executor, whose
    coroutines run on an event loop the actor owns (one call at a time: the driver holds a
    lock per actor)."""

    def __init__(
        self, config: WorkerConfig, env: bytes, spec: str, root: str | None = None
    ) -> None:
        self.error: str | None = None
        self.user_error: str | None = None
        self.root: Path | None = None
        self.spec_path: str | None = None
        self.executor: Any = None
        self.loop = asyncio.new_event_loop()
        try:
            self._start(config, env, spec, root)
        except UserError as exc:  # the env's checks failed in the worker: the user's to fix
            self.user_error = str(exc)
        except Exception as exc:  # reported by ready() as one line, not a remote traceback
            message = str(exc).removeprefix(STARTING)
            self.error = message if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}"

    def _start(self, config: WorkerConfig, env: bytes, spec: str, root: str | None) -> None:
        from rlenv.executors.local import LocalExecutor

        if root is not None:  # a replacement takes over a killed actor's snapshot copies
            self.root = Path(root)
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            # A private root per actor: the driver's work root exists only on its machine.
            shared = Path(config.work_root)
            parent = shared if shared.is_dir() else Path(tempfile.gettempdir())
            self.root = Path(tempfile.mkdtemp(prefix="ray-actor-", dir=parent))
        # the env as the driver packed it, never the driver's paths (which may not exist
        # here); beside the work root, not in it: a worker sees in its work root only the
        # workdir of its call (`rlenv.worker.places.PrivatePlaces.show`)
        self.spec_path = str(bundle.unpack(env, spec, self.root / "env"))
        work_root = self.root / "work"
        work_root.mkdir(exist_ok=True)
        config = dataclasses.replace(config, spec_path=self.spec_path, work_root=str(work_root))
        self.executor = LocalExecutor(config, 1)

    def ready(self) -> dict[str, Any]:
        """What the driver checks before dispatching: a start error, rlenv and Python versions,
        and where a replacement must start (node id, root)."""
        import ray

        return {
            "error": self.error,
            "user_error": self.user_error,
            "node": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "work_root": str(self.root) if self.root else None,
            "spec": self.spec_path,
            "rlenv": __version__,
            "python": list(sys.version_info[:2]),
        }

    def _forward(self, method: str, *args: Any) -> Any:
        """The local executor's `method`, run to its end on the actor's loop; a lost call as
        `_Lost`. What the worker raised (FixtureMiss, RunFailed...) is raised to the driver."""
        try:
            return self.loop.run_until_complete(getattr(self.executor, method)(*args))
        except WorkerLost as lost:
            return _Lost(lost.status, lost.error)

    def run_rollout(self, task: RolloutTask, timeout: float) -> RolloutRecord | _Lost:
        return self._forward("run_rollout", task, timeout)  # type: ignore[no-any-return]

    def prepare(self, task: RolloutTask) -> _Lost | None:
        return self._forward("prepare", task)  # type: ignore[no-any-return]

    def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
    ) -> ToolOutcome | _Lost:
        return self._forward("tool", task, call, turn, number, timeout)  # type: ignore[no-any-return]

    def user(
        self, task: RolloutTask, messages: list[dict[str, Any]], user_turn: int, timeout: float
    ) -> str | None | _Lost:
        return self._forward("user", task, messages, user_turn, timeout)  # type: ignore[no-any-return]

    def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
    ) -> RolloutRecord | _Lost:
        return self._forward("finish", task, trajectory, model, timeout)  # type: ignore[no-any-return]

    def grade(
        self, record: RolloutRecord, timeout: float
    ) -> tuple[RolloutRecord, int, int] | _Lost:
        return self._forward("grade", record, timeout)  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        """Stop the worker (and everything under it), remove the root."""
        if self.executor is not None:
            self.executor.close()
            self.executor = None
        self.loop.close()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


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
            raise RunFailed(f"{STARTING}{exc}") from None
        self.states = states
        self._check_states(states)

    def _check_states(self, states: list[dict[str, Any]]) -> None:
        for state in states:
            if state.get("user_error"):  # what the env's checks found, at the driver's path
                unpacked = state.get("spec") or ""
                message = state["user_error"]
                raise UserError(
                    message.replace(unpacked, self.config.spec_path) if unpacked else message
                )
            if state["error"]:
                raise RunFailed(f"{STARTING.rstrip(': ')} on {state['node']}: {state['error']}")
            if state["rlenv"] != __version__ or state["python"] != list(sys.version_info[:2]):
                raise RunFailed(
                    f"Ray node {state['node']} runs rlenv {state['rlenv']} on Python"
                    f" {'.'.join(map(str, state['python']))}; this driver runs rlenv {__version__}"
                    f" on Python {sys.version_info[0]}.{sys.version_info[1]}: install the same"
                    " on every node"
                )

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
                        message = ("ok", await asyncio.wait_for(reply, host_backstop(timeout)))
                except TimeoutError:  # the actor itself does not answer: its executor neither
                    await self._replace(index)
                    raise WorkerLost("timeout", timeout_message(timeout or 0)) from None
                except ray.exceptions.RayActorError:
                    await self._replace(index)
                    # a dead actor's phase and exit code are not known here: the call's
                    status, where = CALLS[method]
                    raise WorkerLost(status, death_error(where)) from None
                except ray.exceptions.RayTaskError as exc:
                    # the worker's own exception (FixtureMiss, RunFailed...), as a local
                    # worker raises it, without Ray's remote traceback in its message
                    cause = exc.cause
                    if not isinstance(cause, Exception) or isinstance(
                        cause, ray.exceptions.RayError
                    ):
                        raise RunFailed(f"a frozen-world worker failed: {exc}") from None
                    message = ("raise", cause)
                if message[0] == "ok" and type(message[1]) is _Lost:
                    # the actor's executor killed or lost its worker and started another:
                    # the rollout's record says so, as locally
                    raise WorkerLost(message[1].status, message[1].error)
                # the local executor in the actor checked the worker's reply; this checks
                # what the actor sent (its own process, no env code in it)
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
            return await self._call(index, "run_rollout", task, timeout, timeout=timeout)
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
