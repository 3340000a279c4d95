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
import fcntl
import json
import os
import shutil
import signal
import sys
import termios
from collections.abc import Callable
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
from rlenv.bounds import OutOfBounds, tool_content
from rlenv.canonical import directory_manifest
from rlenv.errors import (
    FixtureMiss,
    ModelOutputError,
    PolicyCrash,
    RunFailed,
    UserError,
    VerifierCrash,
    env_frames,
)
from rlenv.files import sys_path
from rlenv.grading import (
    NOT_APPLICABLE,
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
from rlenv.rewards import RewardContext, build_components, build_reward_model, composite
from rlenv.seeding import derive_seed, seed_everything, seed_globals
from rlenv.spec import LoadedSpec, load_spec
from rlenv.verifiers import VerifierContext, build_verifiers
from rlenv.world import netguard, snapshot
from rlenv.world.freeze import freeze_environment, freeze_python_clock, freeze_subprocess_clock
from rlenv.world.replay import FixtureEvent, replay_cassette, spec_indexes
from rlenv.world.scrub import spec_scrubber
from rlenv.world.services import route_logical_hosts, service_urls, service_variables

OUTPUT_LIMIT = 16 * 1024
"""Bytes of stdout and of stderr kept per rollout; the rest is read and discarded."""


@dataclass
class WorkerConfig:
    spec_path: str
    work_root: str
    model_uri: str | None = None  # set when the policy runs inside the world
    allowed_endpoints: list[tuple[str, int]] = field(default_factory=list)
    live_tools: bool = False  # recording: tools reach the network, no replay
    record_dir: str | None = None  # where `rlenv record` writes each tool's cassette
    # recording: each service's logical host -> the real HOST:PORT `rlenv record` started it on
    service_routes: dict[str, str] = field(default_factory=dict)
    expensive_fraction: float = 1.0
    defer_expensive: bool = False
    cache_dir: str | None = None  # grader cache for expensive verifiers; None: off
    parent_pid: int | None = None  # the orchestrator: a worker dies with it
    split: str = "heldout"  # "train": tasks index the spec's train_inputs (rlenv.trl)
    allow_weak_sandbox: bool = False  # code verifiers may run with rlimits only
    thread_filter: bool = False  # Ray: the socket filter goes on each calling thread
    # no snapshot: a rollout's workdir starts empty, so the worker makes it at the rollout's
    # first call and a local executor need not send `prepare` (one round trip fewer)
    empty_workdir: bool = False
    # `rlenv run`: the env's checks that import its python modules, which the orchestrator
    # leaves to the world (`rlenv.env.world_problems` keyword arguments: purpose, model,
    # defer_expensive); what they find stops the start and is the user's to fix (exit 2)
    world_checks: dict[str, Any] | None = None


@dataclass
class ToolContext:
    seed: int
    rng: Any
    input_id: str
    rollout: int
    workdir: Path
    turn: int
    services: dict[str, str] = field(default_factory=dict)  # name -> logical base URL


@dataclass(slots=True)
class RolloutTask:
    # a run holds one per rollout still to run (100k: 12.8 MB with a __dict__ each, 8.8 without)
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
    rewards: dict[str, float | None] | None = None  # the composite reward's components + total
    traceback: list[str] = field(default_factory=list)  # the env's frames of `error`
    reward_traceback: list[str] = field(default_factory=list)  # ... of `reward_error`


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


PHASES = ("idle", "policy", "tool", "verifier", "reward")
"""What a worker is running, kept where the orchestrator can read it after the worker died."""
PHASE_STATUS = {
    "policy": "policy_error",
    "tool": "tool_error",
    "verifier": "verifier_error",
    "reward": "reward_error",
}
"""The status of a rollout whose worker died in that phase; a death between phases is the
policy's (never ``infra_error``: env code must not be able to take its rollout out of the
scores by killing its worker)."""

_phase_cell: Any = None  # a shared int (multiprocessing.RawValue) when the executor gives one
_expired = False  # the rollout's alarm fired, even if env code swallowed the exception


def set_phase(name: str) -> None:
    if _phase_cell is not None:
        _phase_cell.value = PHASES.index(name)


def phase_of(cell: Any) -> str:
    """The phase a (possibly dead) worker last entered, from its shared cell."""
    value = int(cell.value)
    return PHASES[value] if 0 <= value < len(PHASES) else "idle"


def _alarm(signum: int, frame: Any) -> None:
    global _expired
    _expired = True
    raise RolloutTimeout("rollout timed out")


@contextlib.contextmanager
def rollout_timer(seconds: float) -> Any:
    """The in-worker alarm, the cheap first line of ``limits.timeout_s`` (the orchestrator
    kills a worker that outlives it: see ``rlenv.executors``)."""
    global _expired
    _expired = False
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        set_phase("idle")


def timed_out() -> bool:
    """True once the current rollout's alarm has fired."""
    return _expired


def timeout_message(timeout_s: float) -> str:
    """The error of every timed-out rollout, however it was stopped (deterministic)."""
    return f"rollout exceeded limits.timeout_s ({timeout_s:g} s)"


def lost_record(
    loaded: LoadedSpec,
    inputs: list[InputRecord],
    task: RolloutTask,
    model: str,
    status: str,
    error: str,
) -> dict[str, Any]:
    """The sealed record of a rollout that was stopped (timeout) or whose worker died: nothing
    of what it did is kept (how far it got depends on timing), it is not graded and does not
    pass. Made the same way in a worker (the alarm fired) and in the orchestrator (it killed the
    worker), so the record does not depend on which one stopped it."""
    record = inputs[task.input_index]
    messages = record.messages(loaded.spec.system_prompt)
    return seal(
        {
            "input_id": record.id,
            "input_index": record.index,
            "rollout": task.rollout,
            "seed": derive_seed(loaded.spec.seed, record.id, task.rollout),
            "model": model,
            "status": status,
            "error": error,
            "messages": messages,
            "tool_calls": [],
            "answer": None,
            "verifiers": [],
            "passed": False,
            "reward": None,
            "usage": Trajectory(messages=[]).usage,
            "world": {},
        }
    )


class WorldRuntime:
    """Everything a worker needs, built once from the spec; then the frozen world is entered."""

    def __init__(self, config: WorkerConfig, *, freeze: bool = True) -> None:
        self.config = config
        # held for the worker's whole life: the process ends with it
        self._entered = contextlib.ExitStack()
        freeze_environment()
        if config.allow_weak_sandbox:
            from rlenv.verifiers.code import WEAK_SANDBOX_VARIABLE

            os.environ[WEAK_SANDBOX_VARIABLE] = "1"  # read by the code verifiers, in this worker
        self.loaded = load_spec(config.spec_path)
        spec = self.loaded.spec
        # tools see each service at its logical URL, whatever the host's environment says
        os.environ.update(service_variables(spec.services))
        self.services = service_urls(spec.services)
        if config.live_tools and config.service_routes:
            route_logical_hosts(config.service_routes)
        self._entered.enter_context(sys_path(self.loaded.python_paths()))
        if config.world_checks is not None:
            from rlenv.env import problems_to_data, world_problems

            problems = world_problems(self.loaded, **config.world_checks)
            if problems:
                raise WorldChecksFailed(problems_to_data(problems))
        self.work_root = Path(config.work_root)
        self._work_root_text = str(self.work_root)
        self._names: tuple[tuple[int, int] | None, tuple[int, Path]] = (None, (0, self.work_root))
        inputs_path = self.loaded.inputs_path
        if config.split == "train" and self.loaded.train_inputs_path is not None:
            inputs_path = self.loaded.train_inputs_path
        self.inputs: list[InputRecord] = load_inputs(
            inputs_path, templated=self.loaded.spec.prompt is not None
        )
        self._load_tools()
        judged = any(verifier.type == "judge" for verifier in spec.verifiers)
        if judged:
            from rlenv.verifiers import judge

            judge.configure(
                live=config.live_tools,
                spec_root=self.loaded.root,
                record_dir=Path(config.record_dir) if config.record_dir else None,
            )
        self.verifiers = build_verifiers(list(spec.verifiers))
        self.cache: GraderCache | None = None
        self.identities: dict[str, Any] = {}
        if config.cache_dir:
            self._open_cache(Path(config.cache_dir))
        self.reward = build_reward_model(spec.reward_model, self.loaded.root)
        self.reward_components = build_components(spec.reward)
        self.snapshot_path = self.loaded.snapshot_path
        self._frozen_time = spec.time.isoformat()
        self._decoding = spec.decoding.model_dump()  # copied per rollout: env code may change it
        self.snapshot_manifest = (
            directory_manifest(self.snapshot_path) if self.snapshot_path else []
        )
        self._spare: Path | None = None  # the last workdir, put aside for the next rollout
        self._spare_path = self.work_root / f".empty-{os.getpid()}"
        # what a fresh empty workdir looks like (`snapshot.directory_state`); None: none yet,
        # or the workdirs are snapshot copies (never reused)
        self._fresh_state: tuple[Any, ...] | None = None
        self.policy: Any = make_in_world_policy(config.model_uri) if config.model_uri else None
        self.cassette: Any = None
        # no tool, no judge: no recorded HTTP to serve, and nothing to import vcrpy for (a
        # third of a worker's start); HTTP from a policy or verifier meets the network guard
        if not config.live_tools and (spec.tools or judged):
            self.cassette = self._entered.enter_context(
                replay_cassette(
                    spec_indexes(self.loaded, spec_scrubber(self.loaded)),
                    self.work_root / ".replay-none.yaml",
                )
            )
        from rlenv.sandbox import faketime_env

        freeze_subprocess_clock(faketime_env(spec.time.isoformat(), "UTC"))
        if not config.live_tools:
            netguard.install(config.allowed_endpoints)
        # Before any rollout's timer (an embedding model or a checkpoint can take longer to
        # load than limits.timeout_s allows a rollout) and before freezegun swaps the datetime
        # classes (C extensions built against datetime's C API, e.g. pandas, which the model's
        # libraries may import, crash when imported under the fake classes).
        preload = getattr(self.reward, "preload", None)
        if preload is not None:
            with contextlib.suppress(Exception):  # it fails again, as reward_error, when used
                preload()
        if freeze:
            self._freezer = freeze_python_clock(spec.time)
        signal.signal(signal.SIGALRM, _alarm)

    def _load_tools(self) -> None:
        tools = self.loaded.spec.tools
        self.tool_functions = {
            tool.name: import_ref(tool.function, what=f"tool {tool.name!r}") for tool in tools
        }
        self.tool_validators = {}
        if not tools:
            self.schemas = []
            return
        import jsonschema  # ~3 MB a worker without tools does not need

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
        return self._names_of(task)[0]

    def workdir_of(self, task: RolloutTask) -> Path:
        return self._names_of(task)[1]

    def _names_of(self, task: RolloutTask) -> tuple[int, Path]:
        """The task's seed and workdir, made once for the task at hand (a rollout asks for
        them several times); both depend on the task alone."""
        key = (task.input_index, task.rollout)
        if self._names[0] != key:
            record = self.inputs[task.input_index]
            seed = derive_seed(self.loaded.spec.seed, record.id, task.rollout)
            self._names = (key, (seed, self.work_root / f"{key[0]}-{key[1]}"))
        return self._names[1]

    def prepare(self, task: RolloutTask) -> None:
        destination = self.workdir_of(task)
        if self._spare is not None:
            spare, self._spare = self._spare, None
            try:  # an emptied workdir, renamed: a directory made and removed per rollout cost
                os.rename(spare, destination)  # milliseconds on ext4
            except OSError:
                _discard(spare)
            else:
                # Checked here, not when it was put aside: by now whatever the earlier call
                # started is dead and cannot write into it any more.
                if snapshot.directory_state(destination) == self._fresh_state:
                    os.utime(destination)  # its times as a fresh one's: nothing carried over
                    return
                _discard(destination)  # perhaps a link or a file the rollout put there
        snapshot.fresh_copy(self.snapshot_path, destination)
        if self.snapshot_path is None and self._fresh_state is None:
            self._fresh_state = snapshot.directory_state(destination)

    def release(self, task: RolloutTask) -> None:
        """Remove a rollout's workdir; without a snapshot, it is put aside instead, and the
        next rollout takes it if it is then empty and as a fresh one is (`prepare`)."""
        workdir = self.workdir_of(task)
        if self._spare is None and self._fresh_state is not None:
            spare = self._spare_path
            try:
                os.rename(workdir, spare)
                self._spare = spare
                return
            except OSError:
                pass
        shutil.rmtree(workdir, ignore_errors=True)

    def sanitise(self, text: str) -> str:
        return text.replace(self._work_root_text, "<workdir>")

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
        set_phase("tool")
        seed = derive_seed(self.seed_of(task), "tool", turn, number)
        context = ToolContext(
            seed, seed_everything(seed), record.id, task.rollout, workdir, turn, dict(self.services)
        )
        outcome, events = self._invoke_tool(name, arguments, context)
        outcome.fixture = _fixture_use(name, events)
        return outcome

    def _invoke_tool(
        self, name: str, arguments: dict[str, Any], context: ToolContext
    ) -> tuple[ToolOutcome, list[FixtureEvent]]:
        """The tool's outcome (fixture use not yet judged), and the fixture events its HTTP
        produced."""
        cassette = self.cassette
        events_before = len(cassette.events) if cassette else 0
        if cassette is not None:
            type(cassette).current = name
        events: list[FixtureEvent] = []
        with contextlib.chdir(context.workdir):
            try:
                with self._recording(name):
                    result = self.tool_functions[name](arguments, context)
                outcome = ToolOutcome(tool_content(name, result), "none", True)
            except RolloutTimeout:
                raise
            except OutOfBounds as exc:  # not data the rollout can keep: the tool's failure
                raise ToolCrash(str(exc)) from None
            except Exception as exc:  # a fixture miss is judged from the events
                error = self.sanitise(_describe(exc))
                outcome = ToolOutcome(
                    f"error: {error}", "none", False, error, env_frames(exc), _unreachable(exc)
                )
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: never the run's end
                raise ToolCrash(
                    self.sanitise(f"tool {name}: {_describe(exc)}"), env_frames(exc)
                ) from None
            finally:
                if cassette is not None:
                    type(cassette).current = None
                    events = cassette.events[events_before:]
                    del cassette.events[events_before:]
        return outcome, events

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
        crash: VerifierCrash | None = None
        set_phase("verifier")
        for verifier in self.verifiers:
            config = verifier.config
            if only is not None and config.label not in only:
                continue
            if config.when is not None and not config.when.applies(context.input):
                results.append(_ungraded(config, NOT_APPLICABLE))
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
                        try:
                            cached = verifier(context).as_dict()
                        except VerifierCrash as exc:  # not cached; the others still run
                            crash = crash or exc
                            results.append(_ungraded(config, str(exc)))
                            continue
                        self.cache.put(key, cached)
                    results.append(cached)
                    continue
            try:
                results.append(verifier(context).as_dict())
            except VerifierCrash as exc:  # the rollout is a verifier_error; the others still run
                crash = crash or exc
                results.append(_ungraded(config, str(exc)))
        if crash is not None:
            crash.results = results
            raise crash
        return results

    def _recording(self, name: str) -> Any:
        """While recording, the tool's HTTP goes live through a vcrpy cassette that writes."""
        if not self.config.live_tools or not self.config.record_dir:
            return contextlib.nullcontext()
        from rlenv.world.record import recording_cassette

        return recording_cassette(
            Path(self.config.record_dir) / f"{name}.yaml",
            spec_scrubber(self.loaded),
            record_errors=record_errors(self.loaded),
        )

    def lost(self, task: RolloutTask, model: str, status: str, error: str) -> dict[str, Any]:
        return lost_record(self.loaded, self.inputs, task, model, status, error)

    def finish(self, task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
        """Verifiers first, reward model second, then the record; the workdir is removed.
        Under the rollout's timer: a rollout whose timer fired (in the policy, a tool, a
        verifier or the reward model, caught by env code or not) is a timeout record."""
        workdir = self.workdir_of(task)
        expired = trajectory.status == "timeout"
        try:
            if not expired:
                with contextlib.chdir(workdir):
                    if trajectory.status != "infra_error":
                        verdict = self._judge(task, trajectory)
                    else:
                        verdict = Verdict(snapshot.changes(self.snapshot_manifest, workdir))
        except RolloutTimeout:
            expired = True
        finally:
            self.release(task)
        if expired or timed_out():
            timeout_s = self.loaded.spec.limits.timeout_s
            return self.lost(task, model, "timeout", timeout_message(timeout_s))
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
            frozen_time=self._frozen_time,
            snapshot=self.snapshot_path,
            snapshot_hashes=dict(self.snapshot_manifest),
        )
        seed_globals(derive_seed(seed, "verifiers"))
        verdict = Verdict(snapshot.changes(self.snapshot_manifest, workdir))
        hits, misses = self.cache_counts()
        try:
            verdict.results = self.grade(context, task, record.id, verdict.changes)
        except VerifierCrash as exc:  # the other verifiers' results and rewards are kept
            verdict.passed, verdict.status, verdict.error = False, "verifier_error", str(exc)
            verdict.traceback = exc.frames
            verdict.results = exc.results
        if self.cache is not None:
            verdict.cache_counts = {
                "hits": self.cache.hits - hits,
                "misses": self.cache.misses - misses,
            }
        graded = [result for result in verdict.results if result["passed"] is not None]
        verdict.passed = verdict.status is None and all(result["passed"] for result in graded)
        if self.reward is None and self.loaded.spec.reward is None:
            return verdict  # no reward model, no composite reward: no prompt to render again
        reward_context = RewardContext(
            prompt=record.messages(self.loaded.spec.system_prompt, self.loaded.spec.prompt),
            answer=trajectory.answer,
            messages=trajectory.messages,
            input=record.data,
            workdir=workdir,
            seed=seed,
        )
        if self.reward is not None:
            set_phase("reward")
            seed_globals(derive_seed(seed, "reward"))
            try:
                verdict.reward = self.reward(reward_context)
            except Exception as exc:
                verdict.reward_error = self.sanitise(f"{type(exc).__name__}: {exc}")
                verdict.reward_traceback = env_frames(exc)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: never the run's end
                verdict.reward_error = self.sanitise(_describe(exc))
                verdict.status, verdict.error = "reward_error", f"reward model: {_describe(exc)}"
                verdict.reward_traceback = verdict.traceback = env_frames(exc)
        if self.loaded.spec.reward is not None:
            seed_globals(derive_seed(seed, "reward", "components"))
            verdict.rewards, error = composite(
                self.loaded.spec.reward,
                verdict.results,
                verdict.reward,
                self.reward_components,
                reward_context,
            )
            if error and not verdict.reward_error:
                verdict.reward_error = self.sanitise(error)
            if verdict.status == "verifier_error":  # the parts that scored; never a partial total
                verdict.rewards["total"] = None
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
        if verdict.rewards is not None:
            output["rewards"] = verdict.rewards
        frames = verdict.traceback if verdict.error else trajectory.traceback
        if output["error"] and frames:  # only on errors: other records stay as they were
            output["traceback"] = frames
        if verdict.reward_error:
            output["reward_error"] = verdict.reward_error
            if verdict.reward_traceback:
                output["reward_traceback"] = verdict.reward_traceback
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
                seed_globals(derive_seed(int(record["seed"]), "verifiers"))
                context = VerifierContext(
                    answer=record["answer"],
                    messages=record["messages"],
                    input=data,
                    workdir=workdir,
                    seed=int(record["seed"]),
                    frozen_time=self._frozen_time,
                    snapshot=self.snapshot_path,
                    snapshot_hashes=dict(self.snapshot_manifest),
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
        messages = record.messages(spec.system_prompt, spec.prompt)
        replayed = None
        if hasattr(self.policy, "trajectory"):
            replayed = self.policy.trajectory(record.id, task.rollout)
        # one timer for policy, tools, verifiers and reward model
        with rollout_timer(spec.limits.timeout_s):
            try:
                if replayed is not None:
                    trajectory = Trajectory(messages=replayed)
                else:  # a policy crash ends the loop as policy_error, its trajectory kept
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
                trajectory = Trajectory(messages=messages, status="timeout")
            return self.finish(task, trajectory, self.config.model_uri or "")

    def _model_caller(self, task: RolloutTask) -> ModelCall:
        """The in-world policy, called synchronously in the rollout's workdir."""
        record = self.inputs[task.input_index]
        seed = self.seed_of(task)
        decoding = _json_copy(self._decoding)
        workdir = self.workdir_of(task)

        async def call_model(current: list[dict[str, Any]], turn: int) -> ModelReply:
            request = ModelRequest(
                messages=_json_copy(current),
                tools=self.schemas,
                decoding=decoding,
                seed=seed,
                input_id=record.id,
                rollout=task.rollout,
                turn=turn,
            )
            with contextlib.chdir(workdir):
                set_phase("policy")
                try:
                    return self.policy.complete_sync(request)  # type: ignore[no-any-return]
                except (ModelOutputError, RolloutTimeout, FixtureMiss, ToolCrash, PolicyCrash):
                    raise
                except BaseException as exc:  # SystemExit, KeyboardInterrupt too
                    raise PolicyCrash(self.sanitise(_describe(exc)), env_frames(exc)) from None

        return call_model

    def _tool_caller(self, task: RolloutTask) -> ToolCall:
        """Tool calls numbered within their turn (the number seeds the tool)."""
        counters: dict[int, int] = {}

        async def call_tool(call: dict[str, Any], turn: int) -> ToolOutcome:
            number = counters.get(turn, 0)
            counters[turn] = number + 1
            return self.call_tool(task, call, turn, number)

        return call_tool


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (messages), several times faster than `copy.deepcopy`;
    anything else inside (and a structure that refers to itself) goes through deepcopy."""
    try:
        return _json_copied(value)
    except RecursionError:
        return copy.deepcopy(value)


def _json_copied(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _json_copied(item) for key, item in value.items()}
    if kind is list:
        return [_json_copied(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def _discard(path: Path) -> None:
    """Remove whatever is at `path` (a directory tree, a file, a link: never followed)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _describe(exc: BaseException) -> str:
    """``SystemExit: 0``: the exception's type and message, for a record's error."""
    return f"{type(exc).__name__}: {exc}"


def _unreachable(exc: BaseException) -> bool:
    """Whether an error (or one it was raised from) is a connection that could not be made:
    refused, unknown host, or a client library's connect error (httpx, requests, urllib3,
    aiohttp, urllib). `rlenv record` refuses a recording where a service was not there."""
    import socket

    names = {"ConnectError", "ConnectTimeout", "ConnectionError", "NewConnectionError"}
    names |= {"ClientConnectorError", "NetworkRefused"}
    seen: set[int] = set()
    queue: list[BaseException | None] = [exc]
    while queue:
        current = queue.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionError | socket.gaierror):
            return True
        if any(kind.__name__ in names for kind in type(current).__mro__):
            return True
        reason = getattr(current, "reason", None)  # urllib's URLError(reason=OSError)
        queue += [current.__cause__, current.__context__]
        if isinstance(reason, BaseException):
            queue.append(reason)
    return False


def record_errors(loaded: LoadedSpec) -> bool:
    """Whether `rlenv record` keeps error responses (HTTP >= 400, empty bodies): yes unless
    the spec says ``scrub: {record_errors: false}``."""
    scrub = loaded.spec.scrub
    return scrub is None or scrub.record_errors


def _fixture_use(name: str, events: list[FixtureEvent]) -> str:
    """How a tool call used its fixtures: hit, fallback or none; a miss ends the rollout even
    if the tool caught the exception."""
    misses = [event for event in events if event.outcome == "miss"]
    if misses:
        first = misses[0]
        raise FixtureMiss(
            f"unrecorded request for tool {name!r}: {first.method} {first.url}"
            + (f" body sha256:{first.body_sha256[:16]}" if first.body_sha256 else "")
            + " (record it with `rlenv record`, or declare an on_miss fallback)"
        )
    outcomes = {event.outcome for event in events}
    return "fallback" if "fallback" in outcomes else "hit" if "hit" in outcomes else "none"


def _ungraded(config: Any, why: str) -> dict[str, Any]:
    return {"name": config.label, "type": config.type, "passed": None, "score": None, "detail": why}


# -- what in-world code prints ---------------------------------------------------------------


class _Drain:
    """One pipe and the thread that reads it for the worker's whole life (a thread started and
    joined per call cost more than a python policy's whole rollout). What arrives between a
    call's start and its end marker is that call's output: the first `OUTPUT_LIMIT` bytes kept,
    the rest read and discarded, so a writer never blocks on a full pipe."""

    def __init__(self) -> None:
        import threading

        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.write_fd, False)
        self.head = bytearray()
        self.tail = b""
        self.total = 0
        self.marker: bytes | None = None
        self.busy = False  # the drain thread holds bytes it has not yet kept
        self.ended = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True, name="rlenv-drain").start()

    def _run(self) -> None:
        import select

        from rlenv.world.reaper import QUIET_THREADS

        QUIET_THREADS.add(str(threading_native_id()))
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        with open(self.read_fd, "rb", buffering=0, closefd=True) as pipe:
            while True:
                poller.poll()
                self.busy = True  # before the read: `finish` sees it until the bytes are kept
                chunk = pipe.read(65536)
                if not chunk:
                    return
                with self.lock:
                    self.busy = False
                    room = OUTPUT_LIMIT + 64 - len(self.head)  # room for the marker too
                    if room > 0:
                        self.head += chunk[:room]
                    self.total += len(chunk)
                    self.tail = (self.tail + chunk)[-64:]
                    if self.marker is not None and self.tail.endswith(self.marker):
                        self.ended.set()

    def start(self) -> None:
        with self.lock:
            self.head, self.tail, self.total, self.marker = bytearray(), b"", 0, None
            self.ended.clear()

    def finish(self) -> tuple[bytes, bool]:
        """After the call (its writers restored or killed): this call's kept bytes, and
        whether more were written. Waits (at most 5 s, as long as anything still holding the
        pipe may keep writing) for the drain to reach the marker written now."""
        # Nothing waits in the pipe and the drain holds nothing unkept (checked under the lock,
        # after the pipe: the drain marks itself busy before it reads): all was kept, no marker
        # round trip (the common case: nothing written at all).
        if not self.busy and _unread(self.read_fd) == 0:
            with self.lock:
                if not self.busy:
                    total = self.total
                    return bytes(self.head[: min(total, OUTPUT_LIMIT)]), total > OUTPUT_LIMIT
        marker = os.urandom(16)
        with self.lock:
            self.marker = marker
        os.write(self.write_fd, marker)
        self.ended.wait(timeout=5)
        with self.lock:
            total = self.total - len(marker) if self.ended.is_set() else self.total
            kept = bytes(self.head[: min(total, OUTPUT_LIMIT)])
            self.marker = None
        return kept, total > OUTPUT_LIMIT


_drains: list[_Drain] = []


def threading_native_id() -> int:
    import threading

    return threading.get_native_id()


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


class CapturedOutput:
    """fd 1 and fd 2 of this process, pointed at the two drain pipes for one worker call; of
    each stream, the first `OUTPUT_LIMIT` bytes are kept."""

    def __init__(self) -> None:
        self.streams = [b"", b""]
        self.truncated = False
        self._saved: list[int] = []

    def __enter__(self) -> CapturedOutput:
        if not _drains:
            _drains.extend([_Drain(), _Drain()])
        _flush_python_streams()
        self._saved = [os.dup(1), os.dup(2)]
        for fd, drain in zip((1, 2), _drains, strict=True):
            drain.start()
            os.dup2(drain.write_fd, fd)
        return self

    def __exit__(self, *exc: object) -> None:
        _flush_python_streams()
        for fd, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        for index, drain in enumerate(_drains):
            self.streams[index], truncated = drain.finish()
            self.truncated |= truncated

    def as_record(self, sanitise: Any) -> dict[str, Any] | None:
        """The record's ``output`` field, or None when nothing was written."""
        if not any(self.streams):
            return None
        stdout, stderr = (sanitise(s.decode("utf-8", "replace")) for s in self.streams)
        return {"stdout": stdout, "stderr": stderr, "truncated": self.truncated}


def _flush_python_streams() -> None:
    streams = {id(stream): stream for stream in (sys.stdout, sys.stderr)}
    streams.update((id(stream), stream) for stream in (sys.__stdout__, sys.__stderr__))
    for stream in streams.values():  # usually two, each named twice: one flush each
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


class WorldChecksFailed(Exception):
    """The env's in-world checks found problems when the world started (`problems`:
    `rlenv.env.problems_to_data`): the orchestrator reports them as `load_environment` would."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        super().__init__(f"the env's checks found {len(problems)} problem(s)")
        self.problems = problems


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
        _start_error = exc.message if isinstance(exc, UserError) else _describe(exc)
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


def late_grade_lost(record: dict[str, Any], status: str, error: str) -> dict[str, Any]:
    """A record whose late grading was stopped (timeout) or whose worker died: its deferred
    verifiers stay ungraded, the status says why, and it does not pass."""
    updated = {key: value for key, value in record.items() if key not in ("grading", "digest")}
    updated["verifiers"] = [
        dict(v, detail=f"not graded: {status}") if v["detail"] == PENDING else v
        for v in record["verifiers"]
    ]
    updated.update(status=status, error=error, passed=False)
    return seal(updated)


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


GC_THRESHOLD = (50_000, 20, 20)
"""The collector's thresholds while a run goes, in the orchestrator and in local workers:
Python's default (700, 10, 10) spent a quarter of the orchestrator's CPU at 10k rollouts
scanning the records it keeps; the run's objects are mostly acyclic, and a cycle only waits
a little longer to be freed."""


def serve(connection: Any, config: WorkerConfig, phase: Any) -> None:
    """A local worker process's life: start the frozen world, then answer one call at a time
    on `connection` (("ok", value) or ("raise", exception)) until told to stop (None).

    `phase` is a shared int the worker keeps up to date (`set_phase`), read by the orchestrator
    when the worker died or had to be killed."""
    global _phase_cell
    _phase_cell = phase
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
        reply = ("raise", RuntimeError(f"worker: {_describe(exc)}"))
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
