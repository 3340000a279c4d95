"""The worker process's protocol: entering the frozen world (`init_worker`), then answering
calls (`serve`; a Ray actor hosts a local executor whose worker serves the same way) through
one table of entry points.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlenv.agent import RolloutTimeout, ToolOutcome, Trajectory
from rlenv.errors import RunFailed, UserError
from rlenv.results import RolloutRecord
from rlenv.scheduling import behind_the_orchestrator
from rlenv.worker import isolate, places, privileges, template
from rlenv.worker.capture import CapturedOutput, keep_output, merge_output, take_output
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
_in_child = False  # this process is a call's child (`rlenv.worker.isolate`): its parent captures
_orchestrator_fds: list[int] = []  # what a call's child closes first: the pipe to the orchestrator
_places: places.PrivatePlaces | None = None  # this worker's own /tmp, /var/tmp, $HOME

SCRATCH_SOURCE = "rlenv-shm"
"""The source name of the tmpfs the local executor mounts on a worker's /dev/shm (in the
worker's own mount namespace): a worker whose /dev/shm is that mount empties it after each
rollout, so no rollout reads what an earlier one left there. Any other /dev/shm (the host's,
a Ray actor's) is never touched."""
_SCRATCH = Path("/dev/shm")
SHARED_VARIABLE = "RLENV_WORLD_SHARED"
"""Host directories (``os.pathsep``-separated) a call's child may write as they are, besides the
work root and the grader cache: each one is a channel between rollouts, opened by whoever
starts rlenv (the world's variables are set by the orchestrator), never by in-world code. The
test suite opens one for its gates (named pipes a policy blocks on) and logs."""
_scratch_is_ours: bool | None = None
ALLOCATOR_VARIABLES = {"PYTHONMALLOC": "malloc", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
"""What a local worker's interpreter starts with (besides the world's variables) and takes out
of its ``os.environ`` before any env code is imported, so env code sees the variables it saw
before, and a subprocess it starts gets none of them. Python's objects in glibc's heap instead
of pymalloc's 1 MiB arenas, which glibc madvises for transparent huge pages: one contiguous,
2 MiB-aligned heap whose page tables the template's fork per call copies as huge entries, and
a call's child then copies and tears down fewer (measured by bench/fork_ab.py)."""


def _private_scratch_mounted() -> bool:
    global _scratch_is_ours
    if _scratch_is_ours is None:
        try:
            mounts = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            mounts = []
        fields = [line.split()[:3] for line in mounts]
        _scratch_is_ours = [SCRATCH_SOURCE, str(_SCRATCH), "tmpfs"] in fields
    return _scratch_is_ours


_own_semaphores: set[str] | None = None  # in /dev/shm, made by the worker as it started


def _empty_private_scratch() -> None:
    """Remove what the last rollout left in this worker's own /dev/shm. libfaketime's files of
    this process go too, when it starts: it holds them mapped, and a child (which gets a private
    copy of that mapping, `privileges.shared_with_children`) could otherwise write to them by
    name. The semaphores the worker made while it started (loky's, for a reward model) stay: its
    exit unlinks them, and removed they were a traceback on the user's terminal."""
    global _own_semaphores
    if not _private_scratch_mounted():
        return
    if _own_semaphores is None:  # the first time: before any call's child ran
        with contextlib.suppress(OSError):
            _own_semaphores = {
                entry.name
                for entry in _SCRATCH.iterdir()
                if entry.name.startswith("sem.") and "faketime_" not in entry.name
            }
        privileges.keep_from_children([str(_SCRATCH / name) for name in _own_semaphores or ()])
    with contextlib.suppress(OSError):
        for entry in _SCRATCH.iterdir():
            if entry.name in (_own_semaphores or ()):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def init_worker(config: WorkerConfig) -> None:
    """Enter the frozen world. Before any env code is imported: stray output goes to stderr,
    never stdout, and (outside recording) the kernel socket filter is installed on every
    thread. A world that cannot start raises, and is told once, in one line
    (`worker_ready`)."""
    global _runtime, _start_error
    os.dup2(2, 1)
    if not config.live_tools:
        from rlenv.world import sockets
        from rlenv.world.light_imports import leave_out_httpx_cli

        leave_out_httpx_cli()  # not httpx itself: a world without tools need not import it

        sockets.install(whole_process=True)
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


def worker_ready() -> int:
    """The first call into a new worker: its pid, or RunFailed saying why it could not start
    (the pool's own report would be a traceback per worker on stderr)."""
    if _start_error is not None:
        raise RunFailed(f"frozen-world worker failed to start: {_start_error}")
    return os.getpid()


class _Printed:
    """What in-world code printed during an `_in_world` block (the record's ``output``)."""

    output: dict[str, Any] | None = None


@contextlib.contextmanager
def _in_world() -> Iterator[_Printed]:
    """The body of a call that runs env code: what in-world code prints in it is captured (in
    the yielded `_Printed` once the block ends), and nothing it started is left running."""
    from rlenv.world.reaper import no_leftovers

    runtime = _get()
    printed = _Printed()
    if _in_child:  # the worker around this child captures what it prints, and kills what it left
        yield printed
        return
    if runtime.inert:  # no env code runs in this world: nothing of it prints or starts anything
        yield printed
        return
    # a worker whose calls run in children kills what they left after the reply (`_settle`)
    reaper = contextlib.nullcontext() if _orchestrator_fds else no_leftovers()
    with CapturedOutput() as captured, reaper:
        yield printed
    printed.output = captured.as_record(runtime.sanitise)


def _get() -> WorldRuntime:
    worker_ready()
    assert _runtime is not None, "worker not initialised"
    return _runtime


def _timeout_record(task: RolloutTask, model: str) -> RolloutRecord:
    runtime = _get()
    return runtime.lost(
        task, model, "timeout", timeout_message(runtime.loaded.spec.limits.timeout_s)
    )


def _output_path(task: RolloutTask) -> Path:
    """Where the output of a rollout's earlier calls (tools, driven from outside) waits."""
    return _get().real_root / f"{task.input_index}-{task.rollout}.output.json"


def _keep_output(task: RolloutTask, output: dict[str, Any] | None) -> None:
    if output is not None:
        keep_output(_output_path(task), output)


def _with_output(record: RolloutRecord, output: dict[str, Any] | None) -> RolloutRecord:
    """The sealed record with its ``output`` (volatile: not in the digest)."""
    output = merge_output(record.get("output"), output)
    if output is not None:
        record["output"] = output
    return record


# -- the calls a worker answers, by name (`HANDLERS`) ---------------------------------------


def _run_rollout(task: RolloutTask) -> RolloutRecord:
    """A whole rollout, policy in the world; the sealed record."""
    runtime = _get()
    with _in_world() as printed:
        try:
            record = runtime.run_rollout(task)
        except RolloutTimeout:  # the timer fired after grading, while the record was being made
            runtime.release(task)
            record = _timeout_record(task, runtime.config.model_uri or "")
    return _with_output(record, printed.output)


def _prepare(task: RolloutTask) -> None:
    """A fresh snapshot copy for a rollout driven from outside (no env code runs)."""
    _output_path(task).unlink(missing_ok=True)
    _get().prepare(task)


def _prepared(task: RolloutTask) -> None:
    """The rollout's workdir, made now if nothing prepared it (an env without a snapshot
    driven from outside: `WorkerConfig.empty_workdir`)."""
    if _in_child:  # its worker prepared it before the fork (the child cannot reach it)
        return
    runtime = _get()
    if runtime.inert:  # its rollouts have no workdir (`WorldRuntime.inert`): nothing to make
        return
    if runtime.snapshot_path is None and not runtime.real_workdir_of(task).exists():
        _prepare(task)
    runtime.show_workdir(task)  # prepared by another worker, perhaps: shown in this one's view


def _tool(
    task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
) -> ToolOutcome:
    """One tool call, under what is left of the rollout's time (`timeout` seconds); a tool that
    swallowed the timer's exception still ends the rollout as a timeout."""
    _prepared(task)
    runtime = _get()
    with _in_world() as printed, rollout_timer(timeout):
        outcome = runtime.call_tool(task, call, turn, number)
        if timed_out():
            raise RolloutTimeout("rollout timed out")
    _keep_output(task, printed.output)
    return outcome


def _user(
    task: RolloutTask, messages: list[dict[str, Any]], user_turn: int, timeout: float
) -> str | None:
    """The simulated user's next message in a rollout driven from outside (its policy is not
    in the world), under what is left of the rollout's time, as `_tool`."""
    _prepared(task)
    runtime = _get()
    with _in_world() as printed, rollout_timer(timeout):
        said = runtime.user_reply(task, messages, user_turn)
        if timed_out():
            raise RolloutTimeout("rollout timed out")
    _keep_output(task, printed.output)
    return said


def _finish(task: RolloutTask, trajectory: Trajectory, model: str, timeout: float) -> RolloutRecord:
    """Grade a rollout driven from outside; the record (unsealed: the results file's writer or
    the TRL adapter seals it), with all its calls' output."""
    _prepared(task)
    runtime = _get()
    with _in_world() as printed:
        try:
            with rollout_timer(timeout):  # unsealed: its reader seals it (`encode_record`)
                record = runtime.finish(task, trajectory, model, sealed=False)
        except RolloutTimeout:  # the timer fired after grading, while the record was made
            runtime.release(task)
            record = _timeout_record(task, model)
    # an inert world's calls print nothing the worker keeps (`_in_world`): no output waits
    earlier = None if runtime.inert else take_output(_output_path(task))
    return _with_output(record, merge_output(earlier, printed.output))


def _grade(record: RolloutRecord, timeout: float) -> tuple[RolloutRecord, int, int]:
    """A record graded late, with the grader-cache hits and misses it took."""
    runtime = _get()
    with _in_world() as printed:
        hits, misses = runtime.cache_counts()
        with rollout_timer(timeout):
            try:
                updated = runtime.grade_late(record)
            except RolloutTimeout:
                updated = None
            if updated is None or timed_out():
                updated = late_grade_lost(record, "timeout", timeout_message(timeout))
        if runtime.cache is not None:
            hits, misses = runtime.cache.hits - hits, runtime.cache.misses - misses
        else:
            hits, misses = 0, 0
    return _with_output(updated, printed.output), hits, misses


HANDLERS: dict[str, Callable[..., Any]] = {
    "run_rollout": _run_rollout,
    "prepare": _prepare,
    "tool": _tool,
    "user": _user,
    "finish": _finish,
    "grade": _grade,
}
"""The calls a worker answers, by name: a local worker's `serve` and the Ray actor's methods
both dispatch through it (`handle`); `rlenv.executors.base.CALLS` and
`rlenv.executors.replies` know the same names."""


def handle(name: str, *args: Any) -> Any:
    """Answer call `name` in this worker (`init_worker` first)."""
    return HANDLERS[name](*args)


def serve(connection: Any, config: WorkerConfig | None, phase: Any) -> None:
    """A local worker process's life: start the frozen world, then answer one call at a time
    on `connection` (("ok", value) or ("raise", exception)) until told to stop (None).
    Without `config` (a worker started early, `LocalExecutor.early`), the first message is
    it; the orchestrator's end closing first ends the worker.

    `phase` is a shared int the worker keeps up to date (`set_phase`), read by the orchestrator
    when the worker died or had to be killed."""
    behind_the_orchestrator()
    for name, value in ALLOCATOR_VARIABLES.items():  # read as the interpreter started
        if os.environ.get(name) == value:  # ours (`LocalExecutor`), not env code's to see
            del os.environ[name]
    if config is None:
        try:
            config = connection.recv()
        except (EOFError, OSError):
            return
        if not isinstance(config, WorkerConfig):  # None: let go unused
            return
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
    _orchestrator_fds[:] = [connection.fileno()]
    _make_private_places()
    # what the world holds once started is kept for the worker's life: out of the collector's
    # sight, where no call's child (forked from here) touches, and so copies, its pages
    gc.freeze()
    _start_template()
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
        if name == "finish_batch":
            _serve_finishes(connection, *args)
            continue
        _answer_call(connection, name, *args)


def _make_private_places() -> None:
    """This worker's own /tmp, /var/tmp and $HOME (`places.PrivatePlaces`), made once when it
    runs in a mount namespace of its own (the one whose /dev/shm is ours); its work root,
    grader cache, record directory and `SHARED_VARIABLE`'s places kept as they are. And no
    child of it may ptrace it or open its memory."""
    global _places
    privileges.not_dumpable()
    if not _private_scratch_mounted():
        return
    config = _get().config
    if config.cache_dir:  # kept as it is in every call's view: made now
        Path(config.cache_dir).mkdir(parents=True, exist_ok=True)
    keep = [place for place in (config.work_root, config.cache_dir, config.record_dir) if place]
    keep += [place for place in os.environ.get(SHARED_VARIABLE, "").split(os.pathsep) if place]
    # the view is for calls' children: a world none of whose calls runs env code (a replayed
    # or outside policy, no tool, no simulated user) forks none, and needs none (its mounts
    # were most of such a rollout's time); what runs in the worker itself (a verifier) can
    # reach the host's work root through the worker's descriptor whether there is a view or not
    view = config.work_root if _runs_env_code(_get()) else None
    _places = places.PrivatePlaces.make(keep, view=view)
    if _places is not None:
        # a working directory under /tmp or $HOME, entered again by path (contextlib.chdir
        # restores by path), would be on a layer `renew` takes away: every later call then
        # fails in getcwd. "/" is never a private place; every call enters its own workdir.
        os.chdir("/")
        real_root = _places.real_root()
        if real_root is not None:  # the work root is a view: workdirs made through the host's
            runtime = _get()
            runtime.real_root, runtime.show = Path(real_root), _places.show
    _empty_private_scratch()  # before any child: libfaketime's files, named by this pid


def _settle(name: str) -> None:
    """After a call's reply: its children reaped, what they left killed, the private places
    it wrote given a fresh layer, /dev/shm emptied (off the rollout's time)."""
    if name == "prepare" or (_runtime is not None and _runtime.inert):  # no env code ran
        return
    template.settle()
    if _places is not None:
        _places.renew()
    _empty_private_scratch()


def _answer_call(connection: Any, name: str, *args: Any) -> None:
    """Answer call `name` (idle before and after), its env code in a child of its own
    (`isolated`), and send ("ok", value) or ("raise", exception): what a call raises is the
    caller's (FixtureMiss, ToolCrash, RolloutTimeout...); ("died", how) when the child ended
    without an answer (the orchestrator then treats this worker as dead in the child's phase)."""
    set_phase("idle")
    try:
        reply: tuple[str, Any] = ("ok", isolated(name, *args))
    except isolate.ChildDied as died:
        reply = ("died", str(died))
    except Exception as exc:
        reply = ("raise", exc)
    except BaseException as exc:  # pragma: no cover - the worker's own code, not env code
        reply = ("raise", RuntimeError(f"worker: {describe(exc)}"))
    if reply[0] != "died":
        set_phase("idle")
    _send(connection, reply)
    _settle(name)  # nothing of the call stays for the next one


def _child_answer(name: str, *args: Any, took: list[float] | None = None) -> dict[str, Any]:
    """Call `name` (of `CHILD_CALLS`) with `args` in a child process (`rlenv.worker.isolate`):
    its answer as data; what it raised is raised here."""
    tools = _get().tools
    if tools.validators_loaded:  # loaded in the worker after a failed call: in the template too
        tools.validators_loaded = False
        template.in_template("load_validators", ())
    kind, answer = template.in_child(name, args, took=took)
    if kind == "raise":
        raise answer
    return answer  # type: ignore[no-any-return]


def _in_the_template(name: str, args: tuple[Any, ...]) -> None:
    """A call of the worker's run in the template itself (rlenv's own code, never env code):
    what the worker learnt that every later child should start with."""
    if name == "load_validators":  # jsonschema, once a rollout's arguments needed its words
        _get().tools.load_validators()
    else:
        raise KeyError(name)


def _in_the_child(name: str, args: tuple[Any, ...]) -> Any:
    """A call run in its child (forked by the template, `template.start_template`)."""
    global _in_child
    _in_child = True
    return CHILD_CALLS[name](*args)


def _start_template() -> None:
    """The process every call's child is forked from, made once the world is loaded (a world
    none of whose calls runs env code, or one recording, forks none)."""
    runtime = _get()
    if runtime.config.live_tools or not _runs_env_code(runtime):
        return
    from rlenv.worker.capture import drain_ends

    writing, reading = drain_ends()
    closing = _orchestrator_fds + (_places.handles() if _places is not None else []) + reading
    template.start_template(
        _in_the_child, closing=closing, output=writing, in_template=_in_the_template
    )


def isolated(name: str, *args: Any) -> Any:
    """Call `name` with the env code that acts for or with the model (policy, tools) in a child
    of this worker (`rlenv.worker.isolate`): the reply built here from its answer, read as data
    about this call only. Grading (`finish`, `grade`, a whole rollout's verifiers) runs here,
    where no policy or tool code ever ran: one fork per rollout.

    Recording is the exception: its calls run here, one after another (`rlenv record` uses
    one worker). Its tools reach live APIs with the user's keys, which this worker holds
    anyway, and the scrubber learns a secret in one call (a bearer token sent) to remove it
    from the next call's recording (the token echoed back): knowledge a child would take
    with it when it ends."""
    if _get().config.live_tools:
        return handle(name, *args)
    if name == "prepare":  # no env code: a snapshot copy
        return _prepare(*args)
    if name == "finish":
        return _finish(*args)
    if name == "grade":
        return _grade(*args)
    if not template.template_started():  # a worker driven without `serve` (a probe, a bench)
        _start_template()
    with _in_world() as printed:
        if name == "run_rollout":
            value: Any = _rollout_in_child(*args)
        elif name == "tool":
            _prepared(args[0])  # here: the child cannot reach the host's work root
            value = isolate.as_outcome(_child_answer("tool", *args))
        elif name == "user":
            _prepared(args[0])
            value = isolate.as_said(_child_answer("user", *args))
        else:
            raise KeyError(name)
    if name in ("tool", "user"):
        _keep_output(args[0], printed.output)
        return value
    return _with_output(value, printed.output)


def _rollout_in_child(task: RolloutTask) -> RolloutRecord:
    """A whole rollout: the conversation (policy, tools) in a child, whose trajectory comes back
    as data, then the grading here, in this worker, which the policy never ran in (a policy
    that patched the verifiers in its own process patched nothing that grades it)."""
    runtime = _get()
    model = runtime.config.model_uri or ""
    timeout_s = runtime.loaded.spec.limits.timeout_s
    took: list[float] = []  # the conversation's time
    runtime.prepare(task)  # here: the child cannot reach the host's work root
    if _runs_env_code(runtime):
        answer = _child_answer("converse", task, took=took)
        try:
            trajectory = isolate.as_trajectory(answer)
        except TypeError as exc:
            runtime.release(task)
            error = f"the rollout's process answered with something that is not a trajectory: {exc}"
            return runtime.lost(task, model, "policy_error", error[:500])
    else:  # rlenv's own code only: nothing to keep from the next rollout, no child needed
        started = time.clock_gettime(time.CLOCK_MONOTONIC)
        # its trajectory as it is, as a Ray actor's (`handle`): no encoding and decoding of it
        # as a child's answer (13 us of a replayed rollout's ~50), nothing of env code in it
        trajectory = _converse(task)
        took.append(time.clock_gettime(time.CLOCK_MONOTONIC) - started)
    try:
        with rollout_timer(timeout_s - sum(took)):
            # unsealed: the orchestrator's writer makes its digest, from the line it writes
            return runtime.finish(task, trajectory, model, sealed=False)
    except RolloutTimeout:  # the timer fired after grading, while the record was being made
        runtime.release(task)
        return _timeout_record(task, model)


def _runs_env_code(runtime: WorldRuntime) -> bool:
    """Whether a conversation in this world runs env code, and so a child per call: a policy
    of the env's in the world (``python:``), a tool or a simulated user. A replayed policy
    (``replay:``, rlenv's own code reading data) or one outside the world (``openai:``), in an
    env with neither, runs none: its rollouts need no child of their own."""
    return runtime.conversation_runs_env_code()


def _converse(task: RolloutTask) -> Any:
    """The conversation of a whole rollout (in a child). A timer that fired is a timeout even
    when env code swallowed it: the grading, in the worker, cannot see this child's alarm."""
    trajectory = _get().converse(task)
    if timed_out():
        trajectory.status = "timeout"
    return trajectory


CHILD_CALLS: dict[str, Callable[..., Any]] = {"converse": _converse, "tool": _tool, "user": _user}
"""The calls whose env code runs in a child of its own, by name (`isolated`)."""


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
        _answer_call(connection, "run_rollout", task)
    connection.send(("done", None))


def _serve_finishes(connection: Any, calls: list[tuple[Any, ...]]) -> None:
    """Several rollouts' `finish` calls in one request (those that waited for this worker
    together, `LocalExecutor.finish`), each answered as it is sealed, in order, as one `finish`
    call is: the orchestrator pins a death or an overrun on the first one not answered, and
    sends the ones after it again (no "done": the next request waits in the pipe)."""
    for args in calls:
        _answer_call(connection, "finish", *args)
