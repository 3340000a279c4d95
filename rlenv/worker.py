"""The rollout worker: one per process, entered once into the frozen world, then serving
rollouts, tool calls and late grading.

In-world code (policies, tools, verifiers, the python reward model) shares the worker's
process: it starts with the world's environment only (`rlenv.world.environment`), under the
kernel socket filter (`rlenv.world.sockets`), and what it writes to file descriptors 1 and 2
(print, os.write, subprocesses) is captured per call, never reaching rlenv's stdout, and kept,
capped at `OUTPUT_LIMIT` bytes per stream, in the rollout's ``output`` field (left out of the
digest, as wall times are: a debug print is not the policy's behaviour).

The worker freezes the clock, refuses the network, replays tool HTTP and fixes TZ and locale for
its whole life (the mechanisms are in `rlenv.world`; freezegun walks every module when it
starts, so it starts once). Every call is stateless apart from the rollout's snapshot copy on
disk, so any worker can serve any call and results do not depend on scheduling. A finished
rollout is graded (verifiers, then the reward model) and sealed with its digest here.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.agent import (
    ModelCall,
    RolloutTimeout,
    ToolCall,
    ToolCrash,
    ToolOutcome,
    Trajectory,
    parse_arguments,
    rollout_loop,
    run_sync,
)
from rlenv.canonical import canonical_bytes, directory_manifest
from rlenv.errors import FixtureMiss, ModelOutputError, VerifierCrash
from rlenv.files import sys_path
from rlenv.grading import (
    PENDING,
    SKIPPED,
    GraderCache,
    rollout_hash,
    sampled,
    verifier_identity,
)
from rlenv.inputs import InputRecord, load_inputs
from rlenv.providers.base import ModelReply, ModelRequest, import_ref
from rlenv.providers.registry import make_in_world_policy
from rlenv.results import seal
from rlenv.rewards import RewardContext, build_reward_model
from rlenv.seeding import derive_seed, seed_everything
from rlenv.spec import LoadedSpec, load_spec
from rlenv.verifiers import VerifierContext, build_verifiers
from rlenv.world import netguard, snapshot
from rlenv.world.freeze import freeze_environment, freeze_python_clock, freeze_subprocess_clock
from rlenv.world.replay import FixtureEvent, replay_cassette, spec_indexes
from rlenv.world.scrub import spec_scrubber

OUTPUT_LIMIT = 16 * 1024
"""Bytes of stdout and of stderr kept per rollout; the rest is read and discarded."""


class PolicyCrash(Exception):
    """The in-world policy raised; the rollout is a policy error."""


@dataclass
class WorkerConfig:
    spec_path: str
    work_root: str
    model_uri: str | None = None  # set when the policy runs inside the world
    allowed_endpoints: list[tuple[str, int]] = field(default_factory=list)
    live_tools: bool = False  # recording: tools reach the network, no replay
    record_dir: str | None = None  # where `rlenv record` writes each tool's cassette
    expensive_fraction: float = 1.0
    defer_expensive: bool = False
    cache_dir: str | None = None  # grader cache for expensive verifiers; None: off
    parent_pid: int | None = None  # the orchestrator: a worker dies with it
    thread_filter: bool = False  # Ray: the socket filter goes on each calling thread


@dataclass
class ToolContext:
    seed: int
    rng: Any
    input_id: str
    rollout: int
    workdir: Path
    turn: int


@dataclass
class RolloutTask:
    input_index: int
    rollout: int


@dataclass
class Verdict:
    """What grading a finished rollout found (all empty for an infrastructure error)."""

    changes: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    passed: bool | None = None
    reward: float | None = None
    reward_error: str | None = None
    cache_counts: dict[str, int] | None = None
    status: str | None = None  # verifier_error / reward_error: env code tried to end the process
    error: str | None = None


def tool_schemas(loaded: LoadedSpec) -> list[dict[str, Any]]:
    """The spec's tools as OpenAI function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in loaded.spec.tools
    ]


def _alarm(signum: int, frame: Any) -> None:
    raise RolloutTimeout("rollout timed out")


class WorldRuntime:
    """Everything a worker needs, built once from the spec; then the frozen world is entered."""

    def __init__(self, config: WorkerConfig, *, freeze: bool = True) -> None:
        self.config = config
        # held for the worker's whole life: the process ends with it
        self._entered = contextlib.ExitStack()
        freeze_environment()
        self.loaded = load_spec(config.spec_path)
        spec = self.loaded.spec
        self._entered.enter_context(sys_path(self.loaded.python_paths()))
        self.work_root = Path(config.work_root)
        self.inputs: list[InputRecord] = load_inputs(self.loaded.inputs_path)
        self._load_tools()
        self.verifiers = build_verifiers(list(spec.verifiers))
        self.cache: GraderCache | None = None
        self.identities: dict[str, Any] = {}
        if config.cache_dir:
            self._open_cache(Path(config.cache_dir))
        self.reward = build_reward_model(spec.reward_model, self.loaded.root)
        self.snapshot_path = self.loaded.snapshot_path
        self.snapshot_manifest = (
            directory_manifest(self.snapshot_path) if self.snapshot_path else []
        )
        self.policy: Any = make_in_world_policy(config.model_uri) if config.model_uri else None
        self.cassette: Any = None
        if not config.live_tools:
            self.cassette = self._entered.enter_context(
                replay_cassette(
                    spec_indexes(self.loaded, spec_scrubber(self.loaded)),
                    self.work_root / ".replay-none.yaml",
                )
            )
        from rlenv.sandbox import faketime_env

        freeze_subprocess_clock(faketime_env(spec.time.isoformat(), "UTC"))
        if freeze:
            self._freezer = freeze_python_clock(spec.time)
        if not config.live_tools:
            netguard.install(config.allowed_endpoints)
        signal.signal(signal.SIGALRM, _alarm)

    def _load_tools(self) -> None:
        import jsonschema

        tools = self.loaded.spec.tools
        self.tool_functions = {
            tool.name: import_ref(tool.function, what=f"tool {tool.name!r}") for tool in tools
        }
        self.tool_validators = {
            tool.name: jsonschema.validators.validator_for(tool.parameters)(tool.parameters)
            for tool in tools
        }
        self.schemas = tool_schemas(self.loaded)

    def _open_cache(self, root: Path) -> None:
        """The grader cache, and each verifier's identity (config and source hash) in its keys."""
        from rlenv.env import python_sources

        sources = python_sources(self.loaded)
        self.cache = GraderCache(root)
        for verifier_config in self.loaded.spec.verifiers:
            module = (verifier_config.function or "").split(":", 1)[0]
            self.identities[verifier_config.label] = verifier_identity(
                verifier_config, sources.get(module)
            )

    # -- pieces of a rollout -------------------------------------------------------------

    def seed_of(self, task: RolloutTask) -> int:
        record = self.inputs[task.input_index]
        return derive_seed(self.loaded.spec.seed, record.id, task.rollout)

    def workdir_of(self, task: RolloutTask) -> Path:
        return self.work_root / f"{task.input_index}-{task.rollout}"

    def prepare(self, task: RolloutTask) -> None:
        snapshot.fresh_copy(self.snapshot_path, self.workdir_of(task))

    def sanitise(self, text: str) -> str:
        return text.replace(str(self.work_root), "<workdir>")

    def cache_counts(self) -> tuple[int, int]:
        """Grader-cache hits and misses so far in this worker ((0, 0) without a cache)."""
        return (self.cache.hits, self.cache.misses) if self.cache else (0, 0)

    def call_tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int
    ) -> ToolOutcome:
        """Validate the call, run the tool in the rollout's workdir, judge its fixture use."""
        record = self.inputs[task.input_index]
        function = call.get("function") or {}
        name = function.get("name")
        if name not in self.tool_functions:
            return ToolOutcome(f"error: unknown tool {name!r}", "none", False)
        try:
            arguments = parse_arguments(function.get("arguments", ""))
        except ValueError as exc:
            return ToolOutcome(f"error: {exc}", "none", False)
        errors = sorted(
            self.tool_validators[name].iter_errors(arguments), key=lambda e: list(e.path)
        )
        if errors:
            return ToolOutcome(f"error: invalid arguments: {errors[0].message}", "none", False)
        workdir = self.workdir_of(task)
        seed = derive_seed(self.seed_of(task), "tool", turn, number)
        context = ToolContext(seed, seed_everything(seed), record.id, task.rollout, workdir, turn)
        content, ok, events = self._invoke_tool(name, arguments, context)
        return ToolOutcome(content, _fixture_use(name, events), ok)

    def _invoke_tool(
        self, name: str, arguments: dict[str, Any], context: ToolContext
    ) -> tuple[str, bool, list[FixtureEvent]]:
        """The tool's content and success, and the fixture events its HTTP produced."""
        cassette = self.cassette
        events_before = len(cassette.events) if cassette else 0
        if cassette is not None:
            type(cassette).current = name
        events: list[FixtureEvent] = []
        with contextlib.chdir(context.workdir):
            try:
                with self._recording(name):
                    result = self.tool_functions[name](arguments, context)
                content = result if isinstance(result, str) else canonical_bytes(result).decode()
                ok = True
            except RolloutTimeout:
                raise
            except Exception as exc:  # a fixture miss is judged from the events
                content, ok = self.sanitise(f"error: {type(exc).__name__}: {exc}"), False
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: never the run's end
                raise ToolCrash(self.sanitise(f"tool {name}: {_describe(exc)}")) from None
            finally:
                if cassette is not None:
                    type(cassette).current = None
                    events = cassette.events[events_before:]
                    del cassette.events[events_before:]
        return content, ok, events

    def grade(
        self,
        context: VerifierContext,
        task: RolloutTask,
        input_id: str,
        changes: dict[str, Any],
        *,
        only: set[str] | None = None,
        late: bool = False,
    ) -> list[dict[str, Any]]:
        """Run the verifiers in order; expensive ones sampled, deferred or served from cache."""
        results: list[dict[str, Any]] = []
        content: str | None = None
        for verifier in self.verifiers:
            config = verifier.config
            if only is not None and config.label not in only:
                continue
            if config.cost == "expensive":
                if not late and self.config.defer_expensive:
                    results.append(_ungraded(config, PENDING))
                    continue
                if not late and not sampled(
                    self.loaded.spec.seed, input_id, task.rollout, self.config.expensive_fraction
                ):
                    results.append(_ungraded(config, SKIPPED))
                    continue
                if self.cache is not None:
                    if content is None:
                        content = rollout_hash(
                            context.answer, context.messages, context.input, changes
                        )
                    key = self.cache.key(self.identities[config.label], content)
                    cached = self.cache.get(key)
                    if cached is None:
                        cached = verifier(context).as_dict()
                        self.cache.put(key, cached)
                    results.append(cached)
                    continue
            results.append(verifier(context).as_dict())
        return results

    def _recording(self, name: str) -> Any:
        """While recording, the tool's HTTP goes live through a vcrpy cassette that writes."""
        if not self.config.live_tools or not self.config.record_dir:
            return contextlib.nullcontext()
        from rlenv.world.record import recording_cassette

        return recording_cassette(
            Path(self.config.record_dir) / f"{name}.yaml",
            spec_scrubber(self.loaded),
            record_errors=bool(self.loaded.spec.scrub and self.loaded.spec.scrub.record_errors),
        )

    def finish(self, task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
        """Verifiers first, reward model second, then the record; the workdir is removed."""
        workdir = self.workdir_of(task)
        try:
            with contextlib.chdir(workdir):
                if trajectory.status != "infra_error":
                    verdict = self._judge(task, trajectory)
                else:
                    verdict = Verdict(snapshot.changes(self.snapshot_manifest, workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        for result in verdict.results:
            if result["detail"]:
                result["detail"] = self.sanitise(result["detail"])
        return seal(self._rollout_record(task, trajectory, model, verdict))

    def _judge(self, task: RolloutTask, trajectory: Trajectory) -> Verdict:
        """Grade a finished rollout in its workdir (the current directory)."""
        record = self.inputs[task.input_index]
        seed = self.seed_of(task)
        workdir = self.workdir_of(task)
        context = VerifierContext(
            answer=trajectory.answer,
            messages=trajectory.messages,
            input=record.data,
            workdir=workdir,
            seed=seed,
            frozen_time=self.loaded.spec.time.isoformat(),
        )
        seed_everything(derive_seed(seed, "verifiers"))
        verdict = Verdict(snapshot.changes(self.snapshot_manifest, workdir))
        hits, misses = self.cache_counts()
        try:
            verdict.results = self.grade(context, task, record.id, verdict.changes)
        except VerifierCrash as exc:
            verdict.passed, verdict.status, verdict.error = False, "verifier_error", str(exc)
            return verdict
        if self.cache is not None:
            verdict.cache_counts = {
                "hits": self.cache.hits - hits,
                "misses": self.cache.misses - misses,
            }
        graded = [result for result in verdict.results if result["passed"] is not None]
        verdict.passed = all(result["passed"] for result in graded)
        if self.reward is not None:
            seed_everything(derive_seed(seed, "reward"))
            try:
                verdict.reward = self.reward(
                    RewardContext(
                        prompt=record.messages(self.loaded.spec.system_prompt),
                        answer=trajectory.answer,
                        messages=trajectory.messages,
                        input=record.data,
                        workdir=workdir,
                        seed=seed,
                    )
                )
            except Exception as exc:
                verdict.reward_error = self.sanitise(f"{type(exc).__name__}: {exc}")
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: never the run's end
                verdict.reward_error = self.sanitise(_describe(exc))
                verdict.status, verdict.error = "reward_error", f"reward model: {_describe(exc)}"
        return verdict

    def _rollout_record(
        self, task: RolloutTask, trajectory: Trajectory, model: str, verdict: Verdict
    ) -> dict[str, Any]:
        """The results line of a graded rollout (not yet sealed)."""
        record = self.inputs[task.input_index]
        output: dict[str, Any] = {
            "input_id": record.id,
            "input_index": record.index,
            "rollout": task.rollout,
            "seed": self.seed_of(task),
            "model": model,
            "status": verdict.status or trajectory.status,
            "error": self.sanitise(error) if (error := verdict.error or trajectory.error) else None,
            "messages": trajectory.messages,
            "tool_calls": trajectory.tool_calls,
            "answer": trajectory.answer,
            "verifiers": verdict.results,
            "passed": verdict.passed,
            "reward": verdict.reward,
            "usage": trajectory.usage,
            "world": verdict.changes,
        }
        if verdict.reward_error:
            output["reward_error"] = verdict.reward_error
        if any(result["detail"] == PENDING for result in verdict.results):
            output["grading"] = PENDING
        if verdict.cache_counts is not None:
            output["timing"] = {"grader_cache": verdict.cache_counts}
        if trajectory.logprobs is not None:
            output["logprobs"] = trajectory.logprobs
        if trajectory.extra:
            output["extra"] = trajectory.extra
        if trajectory.kl_parts:
            from rlenv.policy_shift.kl import merge_shift_records

            output["kl"] = merge_shift_records(trajectory.kl_parts)
        return output

    def grade_late(self, record: dict[str, Any]) -> dict[str, Any]:
        """`rlenv grade`: run a record's deferred verifiers; same result shape as inline."""
        task = RolloutTask(int(record["input_index"]), int(record["rollout"]))
        pending = {v["name"] for v in record["verifiers"] if v["detail"] == PENDING}
        data = self.inputs[task.input_index].data
        self.prepare(task)  # a fresh snapshot copy: deferred verifiers do not see the final state
        workdir = self.workdir_of(task)
        try:
            with contextlib.chdir(workdir):
                seed_everything(derive_seed(int(record["seed"]), "verifiers"))
                context = VerifierContext(
                    answer=record["answer"],
                    messages=record["messages"],
                    input=data,
                    workdir=workdir,
                    seed=int(record["seed"]),
                    frozen_time=self.loaded.spec.time.isoformat(),
                )
                results = self.grade(
                    context, task, record["input_id"], record["world"], only=pending, late=True
                )
        except VerifierCrash as exc:
            crashed = dict(record, status="verifier_error", error=self.sanitise(str(exc)))
            crashed["passed"] = False
            crashed.pop("grading", None)
            return seal(crashed)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        graded = {result["name"]: result for result in results}
        for result in graded.values():
            if result["detail"]:
                result["detail"] = self.sanitise(result["detail"])
        updated = dict(record)
        updated["verifiers"] = [graded.get(v["name"], v) for v in record["verifiers"]]
        known = [v for v in updated["verifiers"] if v["passed"] is not None]
        updated["passed"] = all(v["passed"] for v in known)
        updated.pop("grading", None)
        return seal(updated)

    # -- a whole rollout, policy inside the world ------------------------------------------

    def run_rollout(self, task: RolloutTask) -> dict[str, Any]:
        """Policy, tools and grading all in this worker, under the rollout's timer."""
        record = self.inputs[task.input_index]
        spec = self.loaded.spec
        self.prepare(task)
        messages = record.messages(spec.system_prompt)
        replayed = None
        if hasattr(self.policy, "trajectory"):
            replayed = self.policy.trajectory(record.id, task.rollout)
        signal.setitimer(signal.ITIMER_REAL, spec.limits.timeout_s)
        try:
            if replayed is not None:
                trajectory = Trajectory(messages=replayed)
            else:
                try:
                    trajectory = run_sync(
                        rollout_loop(
                            messages,
                            spec.limits.max_turns,
                            self._model_caller(task),
                            self._tool_caller(task),
                        )
                    )
                except PolicyCrash as exc:
                    trajectory = Trajectory(
                        messages=messages, status="policy_error", error=str(exc)
                    )
        except RolloutTimeout:
            trajectory = Trajectory(messages=messages, status="timeout", error="rollout timed out")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return self.finish(task, trajectory, self.config.model_uri or "")

    def _model_caller(self, task: RolloutTask) -> ModelCall:
        """The in-world policy, called synchronously in the rollout's workdir."""
        record = self.inputs[task.input_index]
        seed = self.seed_of(task)
        decoding = self.loaded.spec.decoding.model_dump()
        workdir = self.workdir_of(task)

        async def call_model(current: list[dict[str, Any]], turn: int) -> ModelReply:
            request = ModelRequest(
                messages=copy.deepcopy(current),
                tools=self.schemas,
                decoding=decoding,
                seed=seed,
                input_id=record.id,
                rollout=task.rollout,
                turn=turn,
            )
            with contextlib.chdir(workdir):
                try:
                    return self.policy.complete_sync(request)  # type: ignore[no-any-return]
                except (ModelOutputError, RolloutTimeout, FixtureMiss, ToolCrash):
                    raise
                except BaseException as exc:  # SystemExit, KeyboardInterrupt too
                    raise PolicyCrash(self.sanitise(_describe(exc))) from None

        return call_model

    def _tool_caller(self, task: RolloutTask) -> ToolCall:
        """Tool calls numbered within their turn (the number seeds the tool)."""
        counters: dict[int, int] = {}

        async def call_tool(call: dict[str, Any], turn: int) -> ToolOutcome:
            number = counters.get(turn, 0)
            counters[turn] = number + 1
            return self.call_tool(task, call, turn, number)

        return call_tool


def _describe(exc: BaseException) -> str:
    """``SystemExit: 0``: the exception's type and message, for a record's error."""
    return f"{type(exc).__name__}: {exc}"


def _fixture_use(name: str, events: list[FixtureEvent]) -> str:
    """How a tool call used its fixtures: hit, fallback or none; a miss ends the rollout even
    if the tool caught the exception."""
    misses = [event for event in events if event.outcome == "miss"]
    if misses:
        raise FixtureMiss(
            f"unrecorded request for tool {name!r}: {misses[0].method} {misses[0].url}"
            " (record it with `rlenv record`, or declare an on_miss fallback)"
        )
    outcomes = {event.outcome for event in events}
    return "fallback" if "fallback" in outcomes else "hit" if "hit" in outcomes else "none"


def _ungraded(config: Any, why: str) -> dict[str, Any]:
    return {"name": config.label, "type": config.type, "passed": None, "score": None, "detail": why}


# -- what in-world code prints ---------------------------------------------------------------


class CapturedOutput:
    """fd 1 and fd 2 of this process, redirected into two pipes for one worker call; each is
    drained into memory, its first `OUTPUT_LIMIT` bytes kept."""

    def __init__(self) -> None:
        self.streams = [bytearray(), bytearray()]
        self.truncated = False
        self._saved: list[int] = []
        self._threads: list[Any] = []

    def _drain(self, fd: int, sink: bytearray) -> None:
        with open(fd, "rb", buffering=0, closefd=True) as pipe:
            while chunk := pipe.read(65536):
                room = OUTPUT_LIMIT - len(sink)
                if room > 0:
                    sink += chunk[:room]
                if len(chunk) > max(room, 0):
                    self.truncated = True

    def __enter__(self) -> CapturedOutput:
        import threading

        _flush_python_streams()
        self._saved = [os.dup(1), os.dup(2)]
        for fd, sink in zip((1, 2), self.streams, strict=True):
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            thread = threading.Thread(target=self._drain, args=(read, sink), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        _flush_python_streams()
        for fd, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, fd)  # closes our pipe's write end: the drain reads to its end
            os.close(saved)
        for thread in self._threads:
            thread.join(timeout=5)

    def as_record(self, sanitise: Any) -> dict[str, Any] | None:
        """The record's ``output`` field, or None when nothing was written."""
        if not any(self.streams):
            return None
        stdout, stderr = (sanitise(s.decode("utf-8", "replace")) for s in self.streams)
        return {"stdout": stdout, "stderr": stderr, "truncated": self.truncated}


def _flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()  # type: ignore[union-attr]


def merge_output(
    first: dict[str, Any] | None, second: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Two calls' output, concatenated per stream and cut to `OUTPUT_LIMIT` characters."""
    if not first or not second:
        return first or second
    merged = {"truncated": bool(first["truncated"] or second["truncated"])}
    for stream in ("stdout", "stderr"):
        text = first[stream] + second[stream]
        if len(text) > OUTPUT_LIMIT:
            text, merged["truncated"] = text[:OUTPUT_LIMIT], True
        merged[stream] = text
    return merged


# -- process entry points (module-level so a process pool can pickle them) -----------------

_runtime: WorldRuntime | None = None


def init_worker(config: WorkerConfig, *, whole_process: bool = True) -> None:
    """Enter the frozen world. Before any env code is imported: stray output goes to stderr,
    never stdout, and (outside recording) the kernel socket filter is installed, on every
    thread (``whole_process``) or, in a Ray actor whose own threads need other sockets, on
    the calling thread only."""
    global _runtime
    os.dup2(2, 1)
    if not config.live_tools:
        from rlenv.world import sockets

        sockets.install(whole_process=whole_process)
    if config.parent_pid is not None:
        from rlenv.world.reaper import bind_to_parent

        bind_to_parent(config.parent_pid)
    _runtime = WorldRuntime(config)


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
    assert _runtime is not None, "worker not initialised"
    return _runtime


def _output_path(task: RolloutTask) -> Path:
    """Where the output of a rollout's earlier calls (tools, driven from outside) waits."""
    return _get().work_root / f"{task.input_index}-{task.rollout}.output.json"


def _keep_output(task: RolloutTask, output: dict[str, Any] | None) -> None:
    if output is None:
        return
    import json

    path = _output_path(task)
    earlier = json.loads(path.read_text()) if path.exists() else None
    path.write_text(json.dumps(merge_output(earlier, output)))


def _take_output(task: RolloutTask) -> dict[str, Any] | None:
    import json

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
    return _get().run_rollout(task)


def worker_run_rollout(task: RolloutTask) -> dict[str, Any]:
    record, output = _run_rollout(task)
    return _with_output(record, output)


def worker_prepare(task: RolloutTask) -> None:
    _output_path(task).unlink(missing_ok=True)
    _get().prepare(task)  # a snapshot copy: no env code runs


@_in_world
def _tool(task: RolloutTask, call: dict[str, Any], turn: int, number: int) -> ToolOutcome:
    runtime = _get()
    signal.setitimer(signal.ITIMER_REAL, runtime.loaded.spec.limits.timeout_s)
    try:
        return runtime.call_tool(task, call, turn, number)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def worker_tool(task: RolloutTask, call: dict[str, Any], turn: int, number: int) -> ToolOutcome:
    outcome, output = _tool(task, call, turn, number)
    _keep_output(task, output)
    return outcome  # type: ignore[no-any-return]


@_in_world
def _grade(record: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    runtime = _get()
    hits, misses = runtime.cache_counts()
    updated = runtime.grade_late(record)
    if runtime.cache is None:
        return updated, 0, 0
    return updated, runtime.cache.hits - hits, runtime.cache.misses - misses


def worker_grade(record: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """A record graded late, with the grader-cache hits and misses it took."""
    (updated, hits, misses), output = _grade(record)
    return _with_output(updated, output), hits, misses


@_in_world
def _finish(task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
    return _get().finish(task, trajectory, model)


def worker_finish(task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
    record, output = _finish(task, trajectory, model)
    return _with_output(record, merge_output(_take_output(task), output))
