"""The worker process's protocol: entering the frozen world (`init_worker`), then answering
calls (`serve` for a local worker, the Ray actor's methods) through one table of entry points.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlenv.agent import RolloutTimeout, ToolOutcome, Trajectory
from rlenv.errors import RunFailed, UserError
from rlenv.worker.capture import CapturedOutput, merge_output
from rlenv.worker.config import GC_THRESHOLD, RolloutTask, WorkerConfig
from rlenv.worker.lost import late_grade_lost
from rlenv.worker.runtime import WorldChecksFailed, WorldRuntime
from rlenv.worker.timers import (
    rollout_timer,
    set_phase,
    timed_out,
    timeout_message,
    use_phase_cell,
)
from rlenv.worker.tools import describe

# -- process entry points (module-level: a worker process or a Ray actor calls them) --------

_runtime: WorldRuntime | None = None
_start_error: str | None = None


def init_worker(config: WorkerConfig, *, whole_process: bool = True) -> None:
    """Enter the frozen world. Before any env code is imported: stray output goes to stderr,
    never stdout, and (outside recording) the kernel socket filter is installed, on every
    thread (``whole_process``) or, in a Ray actor whose own threads need other sockets, on
    the calling thread only. A world that cannot start raises, and is told once, in one line
    (`worker_ready`)."""
    global _runtime, _start_error
    os.dup2(2, 1)
    if not config.live_tools:
        _import_httpx_without_cli()
        from rlenv.world import sockets

        sockets.install(whole_process=whole_process)
    if config.parent_pid is not None:
        from rlenv.world.reaper import bind_to_parent

        bind_to_parent(config.parent_pid)
    try:
        _runtime = WorldRuntime(config)
    except WorldChecksFailed as exc:  # its problems are sent as data (serve, the Ray actor)
        _start_error = str(exc)
        raise
    except Exception as exc:  # told once, in one line, by the orchestrator (`worker_ready`)
        _start_error = exc.message if isinstance(exc, UserError) else describe(exc)
        raise


def _import_httpx_without_cli() -> None:
    """Import httpx (tool replay's vcrpy patches it) without its command-line client: httpx
    imports the client's libraries (rich, pygments, click: ~5 MB of a worker) when they are
    installed, and falls back to a stub `httpx.main` when they are not, as here. Env code
    that imports ``httpx._main`` itself still can."""
    if "httpx" in sys.modules:
        return
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
    try:
        import httpx  # noqa: F401
    except ImportError:  # not installed: vcrpy has nothing to patch
        pass
    finally:
        if "httpx._main" in sys.modules and sys.modules["httpx._main"] is None:
            del sys.modules["httpx._main"]


def worker_ready() -> int:
    """The first call into a new worker: its pid, or RunFailed saying why it could not start
    (the pool's own report would be a traceback per worker on stderr)."""
    if _start_error is not None:
        raise RunFailed(f"frozen-world worker failed to start: {_start_error}")
    return os.getpid()


def _in_world(function: Any) -> Any:
    """A worker entry point: what in-world code prints during the call is captured (returned
    as the call's second value), and nothing the call started is left running."""
    import functools

    from rlenv.world.reaper import no_leftovers

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        runtime = _get()
        if not runtime.config.live_tools and runtime.config.thread_filter:
            from rlenv.world import sockets

            sockets.install(whole_process=False)
        with CapturedOutput() as captured, no_leftovers():
            result = function(*args)
        return result, captured.as_record(runtime.sanitise)

    return call


def _get() -> WorldRuntime:
    worker_ready()
    assert _runtime is not None, "worker not initialised"
    return _runtime


def _timeout_record(task: RolloutTask, model: str) -> dict[str, Any]:
    runtime = _get()
    return runtime.lost(
        task, model, "timeout", timeout_message(runtime.loaded.spec.limits.timeout_s)
    )


def _output_path(task: RolloutTask) -> Path:
    """Where the output of a rollout's earlier calls (tools, driven from outside) waits."""
    return _get().work_root / f"{task.input_index}-{task.rollout}.output.json"


def _keep_output(task: RolloutTask, output: dict[str, Any] | None) -> None:
    if output is None:
        return
    path = _output_path(task)
    earlier = json.loads(path.read_text()) if path.exists() else None
    path.write_text(json.dumps(merge_output(earlier, output)))


def _take_output(task: RolloutTask) -> dict[str, Any] | None:
    path = _output_path(task)
    if not path.exists():
        return None
    output = json.loads(path.read_text())
    path.unlink()
    return output  # type: ignore[no-any-return]


def _with_output(record: dict[str, Any], output: dict[str, Any] | None) -> dict[str, Any]:
    """The sealed record with its ``output`` (volatile: not in the digest)."""
    output = merge_output(record.get("output"), output)
    if output is not None:
        record["output"] = output
    return record


@_in_world
def _run_rollout(task: RolloutTask) -> dict[str, Any]:
    runtime = _get()
    try:
        return runtime.run_rollout(task)
    except RolloutTimeout:  # the timer fired after grading, while the record was being made
        runtime.release(task)
        return _timeout_record(task, runtime.config.model_uri or "")


def worker_run_rollout(task: RolloutTask) -> dict[str, Any]:
    record, output = _run_rollout(task)
    return _with_output(record, output)


def worker_prepare(task: RolloutTask) -> None:
    _output_path(task).unlink(missing_ok=True)
    _get().prepare(task)  # a snapshot copy: no env code runs


def _prepared(task: RolloutTask) -> None:
    """The rollout's workdir, made now if nothing prepared it (an env without a snapshot
    driven from outside: `WorkerConfig.empty_workdir`)."""
    runtime = _get()
    if runtime.snapshot_path is None and not runtime.workdir_of(task).exists():
        worker_prepare(task)


@_in_world
def _tool(
    task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
) -> ToolOutcome:
    runtime = _get()
    with rollout_timer(timeout):
        outcome = runtime.call_tool(task, call, turn, number)
        if timed_out():
            raise RolloutTimeout("rollout timed out")
        return outcome


def worker_tool(
    task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
) -> ToolOutcome:
    """One tool call, under what is left of the rollout's time (`timeout` seconds); a tool that
    swallowed the timer's exception still ends the rollout as a timeout."""
    _prepared(task)
    outcome, output = _tool(task, call, turn, number, timeout)
    _keep_output(task, output)
    return outcome  # type: ignore[no-any-return]


@_in_world
def _grade(record: dict[str, Any], timeout: float) -> tuple[dict[str, Any], int, int]:
    runtime = _get()
    hits, misses = runtime.cache_counts()
    with rollout_timer(timeout):
        try:
            updated = runtime.grade_late(record)
        except RolloutTimeout:
            updated = None
        if updated is None or timed_out():
            updated = late_grade_lost(record, "timeout", timeout_message(timeout))
    if runtime.cache is None:
        return updated, 0, 0
    return updated, runtime.cache.hits - hits, runtime.cache.misses - misses


def worker_grade(record: dict[str, Any], timeout: float) -> tuple[dict[str, Any], int, int]:
    """A record graded late, with the grader-cache hits and misses it took."""
    (updated, hits, misses), output = _grade(record, timeout)
    return _with_output(updated, output), hits, misses


@_in_world
def _finish(
    task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
) -> dict[str, Any]:
    try:
        with rollout_timer(timeout):
            return _get().finish(task, trajectory, model)
    except RolloutTimeout:  # the timer fired after grading, while the record was being made
        _get().release(task)
        return _timeout_record(task, model)


def worker_finish(
    task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
) -> dict[str, Any]:
    _prepared(task)
    record, output = _finish(task, trajectory, model, timeout)
    return _with_output(record, merge_output(_take_output(task), output))


ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "run_rollout": worker_run_rollout,
    "prepare": worker_prepare,
    "tool": worker_tool,
    "finish": worker_finish,
    "grade": worker_grade,
}


def serve(connection: Any, config: WorkerConfig, phase: Any) -> None:
    """A local worker process's life: start the frozen world, then answer one call at a time
    on `connection` (("ok", value) or ("raise", exception)) until told to stop (None).

    `phase` is a shared int the worker keeps up to date (`set_phase`), read by the orchestrator
    when the worker died or had to be killed."""
    use_phase_cell(phase)
    import gc

    gc.set_threshold(*GC_THRESHOLD)  # this process is ours: fewer scans of what it keeps
    try:
        init_worker(config)
    except WorldChecksFailed as exc:
        connection.send(("problems", exc.problems))
        return
    except Exception as exc:
        connection.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    connection.send(("ready", os.getpid()))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        name, args = message
        if name == "run_batch":
            _serve_batch(connection, *args)
            continue
        _answer_call(connection, ENTRY_POINTS[name], *args)


def _answer_call(connection: Any, entry: Callable[..., Any], *args: Any) -> None:
    """Call an entry point (idle before and after) and send ("ok", value) or ("raise",
    exception): what a call raises is the caller's (FixtureMiss, ToolCrash, RolloutTimeout...)."""
    set_phase("idle")
    try:
        reply: tuple[str, Any] = ("ok", entry(*args))
    except Exception as exc:
        reply = ("raise", exc)
    except BaseException as exc:  # pragma: no cover - entry points contain env code's
        reply = ("raise", RuntimeError(f"worker: {describe(exc)}"))
    set_phase("idle")
    _send(connection, reply)


def _send(connection: Any, reply: tuple[str, Any]) -> None:
    try:
        connection.send(reply)
    except Exception as exc:  # an exception that does not pickle
        connection.send(("raise", RuntimeError(f"worker: unpicklable reply: {exc}")))


def _serve_batch(connection: Any, tasks: list[RolloutTask]) -> None:
    """Whole rollouts one after another, each answered as soon as it is sealed (("ok",
    record) or ("raise", exception)), then ("done", None): one request for many rollouts, and
    the orchestrator knows the rollout a death or an overrun happened in without asking this
    process (in-world code could lie): the first one not answered."""
    for task in tasks:
        _answer_call(connection, worker_run_rollout, task)
    connection.send(("done", None))
