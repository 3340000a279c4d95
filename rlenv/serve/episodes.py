"""Served episodes: one frozen-world rollout driven one model turn at a time by a remote policy.

An episode runs the same agent loop as `rlenv run` (`rlenv.agent.rollout_loop`, or
`conversation_loop` when the spec has a simulated user: then an action that is the agent's reply
is answered with the user's next turn, made in a worker, until the user or max_turns ends the
episode), with the model call answered by the client's next action instead of a provider: tool
calls are replayed by a frozen-world worker of a bounded pool (`rlenv.executors`), the finished
trajectory is graded there (`Executor.finish`), and its sealed record is appended to the run
directory. The same trajectory therefore gives the same record, and digest, as `rlenv run`.

No openenv import here: this is the library part, the server (`rlenv.serve.app`) wraps it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from rlenv.agent import (
    RolloutTimeout,
    ToolOutcome,
    Trajectory,
    conversation_loop,
    parse_arguments,
    rollout_loop,
)
from rlenv.audit_reader import seal_run_json
from rlenv.bounds import MAX_REPLY_BYTES, reply_problem
from rlenv.env import Environment, load_environment
from rlenv.errors import FixtureMiss, ModelOutputError, UserError, WorkerLost
from rlenv.executors import Executor, make_executor
from rlenv.files import atomic_write
from rlenv.inputs import EnvInput, load_inputs
from rlenv.providers.base import ModelReply
from rlenv.providers.python import normalise_reply
from rlenv.results import ResultsWriter, RolloutRecord, ToolCallRecord, iter_results
from rlenv.run_dir import _open_run_dir, _pretty, _run_dir_lock, default_run_dir
from rlenv.runner import world_modes
from rlenv.seeding import derive_seed
from rlenv.summary import build_summary, judges_block
from rlenv.verifiers.judge import Judges
from rlenv.verifiers.judge import describe as describe_judges
from rlenv.worker.config import RolloutTask, WorkerConfig
from rlenv.worker.lost import lost_record
from rlenv.worker.tools import tool_schemas

SPLITS = ("heldout", "train")
DEFAULT_MODEL = "openenv"
MAX_ACTION_BYTES = MAX_REPLY_BYTES
"""An action (one assistant message) larger than a model reply may be is refused."""
_ACTION_FIELDS = frozenset({"role", "content", "tool_calls", "usage", "metadata"})


class ServeError(Exception):
    """A bad request (unknown input, a step after done, a malformed or oversized action): one
    line for the client; nothing of the world or the run directory changed."""


def model_reply(action: dict[str, Any]) -> ModelReply:
    """The client's action as the reply of a model turn, checked as a policy's reply is (its
    shape and bounds), or ServeError saying what is wrong."""
    unknown = sorted(set(action) - _ACTION_FIELDS)
    if unknown:
        raise ServeError(
            f"unknown action field {unknown[0]!r}: an action is an assistant message"
            " (content, tool_calls, usage)"
        )
    if action.get("role", "assistant") != "assistant":
        raise ServeError(f"an action is the assistant's message, not {action['role']!r}'s")
    size = len(json.dumps(action, default=str).encode())
    if size > MAX_ACTION_BYTES:
        raise ServeError(f"the action is {size} bytes, more than the limit of {MAX_ACTION_BYTES}")
    message = {key: action[key] for key in ("content", "tool_calls") if action.get(key) is not None}
    if not message:
        raise ServeError("the action has neither content nor tool_calls")
    try:
        normalised = normalise_reply(message)
    except Exception as exc:  # ModelOutputError, PolicyCrash: the shape is wrong
        raise ServeError(f"malformed action: {exc}") from None
    problem = reply_problem(normalised)
    if problem is not None:
        raise ServeError(f"malformed action: the message {problem}")
    usage = action.get("usage") or {}
    if not isinstance(usage, dict) or not all(
        isinstance(key, str) and isinstance(value, int) and not isinstance(value, bool)
        for key, value in usage.items()
    ):
        raise ServeError("malformed action: usage must map token kinds to integers")
    return ModelReply(message=normalised, usage=dict(usage))


def composite_reward(record: Mapping[str, Any], has_reward_model: bool) -> float | None:
    """The episode's reward as `rlenv.trl` trains on it: the spec's composite total, else the
    verifiers' pass (1/0) plus the reward model's score when the spec has one."""
    rewards = record.get("rewards")
    if rewards is not None:
        total = rewards.get("total")
        return None if total is None else float(total)
    passed = record.get("passed")
    if passed is None:
        return None
    value = float(passed)
    if has_reward_model and record.get("reward") is not None:
        value += float(record["reward"])
    return value


@dataclass
class Step:
    """What the world answers an action (or a reset) with."""

    messages: list[dict[str, Any]]
    turn: int = 0
    record: RolloutRecord | None = None

    @property
    def done(self) -> bool:
        return self.record is not None


@dataclass
class Episode:
    """One rollout in progress: the agent loop runs as a task that waits for each model turn."""

    world: ServedWorld
    episode_id: str
    input: EnvInput
    task: RolloutTask
    seed: int
    replies: asyncio.Queue[ModelReply] = field(default_factory=asyncio.Queue)
    events: asyncio.Queue[Step | BaseException] = field(default_factory=asyncio.Queue)
    messages: list[dict[str, Any]] = field(default_factory=list)  # the loop's live trajectory
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    calls_in_turn: dict[int, int] = field(default_factory=dict)
    shown: int = 0  # messages the client has seen
    turn: int = 0
    waiting: bool = False  # the loop waits for the client's next turn
    record: RolloutRecord | None = None
    runner: asyncio.Task[None] | None = None
    abandoned: bool = False

    @property
    def done(self) -> bool:
        return self.record is not None

    async def start(self) -> Step:
        """Enter the world (a fresh snapshot copy) and wait for the loop's first model turn."""
        await self.world.executor.prepare(self.task)
        self.runner = asyncio.get_running_loop().create_task(self._run())
        return await self._next()

    async def step(self, reply: ModelReply) -> Step:
        if self.done:
            raise ServeError(f"episode {self.episode_id} is over (done): reset to start another")
        if not self.waiting:
            raise ServeError(f"episode {self.episode_id} is busy with the previous action")
        self.waiting = False
        self.replies.put_nowait(reply)
        return await self._next()

    def cancel(self) -> None:
        """Abandon the episode (its client went away): nothing is written for it. A loop
        waiting for the model stops at once; one inside a worker call finishes that call
        first (a call cut off would leave its answer in the worker's pipe for the next one)."""
        self.abandoned = True
        if self.runner is not None and not self.runner.done() and self.waiting:
            self.runner.cancel()

    async def _next(self) -> Step:
        event = await self.events.get()
        if isinstance(event, BaseException):
            raise event
        return event

    async def _call_model(self, current: list[dict[str, Any]], turn: int) -> ModelReply:
        self.messages, self.turn = current, turn
        new = [dict(message) for message in current[self.shown :] if message["role"] != "assistant"]
        self.shown = len(current)
        self.waiting = True
        self.events.put_nowait(Step(messages=new, turn=turn))
        if self.abandoned:
            raise asyncio.CancelledError
        reply = await self.replies.get()
        self.shown += 1  # the assistant message the client sent
        return reply

    async def _call_tool(self, call: dict[str, Any], turn: int) -> ToolOutcome:
        number = self.calls_in_turn.get(turn, 0)
        self.calls_in_turn[turn] = number + 1
        timeout = self.world.prepared.loaded.spec.limits.timeout_s
        outcome = await self.world.executor.tool(self.task, call, turn, number, timeout)
        function = call["function"]
        try:
            arguments: Any = parse_arguments(function.get("arguments", ""))
        except ValueError:
            arguments = function.get("arguments")
        self.tool_calls.append(  # for `state` (the loop keeps its own for the record)
            {
                "turn": turn,
                "id": call["id"],
                "name": function["name"],
                "arguments": arguments,
                "fixture": outcome.fixture,
                "ok": outcome.ok,
            }
        )
        return outcome

    async def _call_user(self, current: list[dict[str, Any]], user_turn: int) -> str | None:
        """The simulated user's next message, made in a worker as `rlenv run` makes it; the
        client sees it as the observation of its next turn."""
        timeout = self.world.prepared.loaded.spec.limits.timeout_s
        return await self.world.executor.user(self.task, current, user_turn, timeout)

    async def _run(self) -> None:
        world = self.world
        spec = world.prepared.loaded.spec
        prompt = self.input.messages(spec.system_prompt, spec.prompt)
        try:
            try:
                try:
                    if spec.user is None:
                        trajectory = await rollout_loop(
                            prompt, spec.limits.max_turns, self._call_model, self._call_tool
                        )
                    else:  # an agent's reply is followed by the user's turn, until it ends
                        trajectory = await conversation_loop(
                            prompt,
                            spec.user,
                            spec.limits.max_turns,
                            self._call_model,
                            self._call_tool,
                            self._call_user,
                        )
                except RolloutTimeout:  # in a user's turn (the agent loop classifies its own)
                    trajectory = Trajectory(messages=prompt, status="timeout")
                self.messages, self.tool_calls = trajectory.messages, trajectory.tool_calls
                record = await world.executor.finish(
                    self.task, trajectory, world.model, spec.limits.timeout_s
                )
            except WorkerLost as lost:  # killed for overrunning, or died: as `rlenv run` says it
                record = lost_record(
                    world.prepared.loaded,
                    world.inputs,
                    self.task,
                    world.model,
                    lost.status,
                    lost.error,
                )
            if self.abandoned:
                return
            record = await world.judged(record)
            world.write(record)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            self.events.put_nowait(exc)
            return
        self.record = record
        final = [
            dict(message)
            for message in self.messages[self.shown :]
            if message["role"] != "assistant"
        ]
        self.events.put_nowait(Step(messages=final, turn=self.turn, record=record))


class ServedWorld:
    """The env loaded once, a bounded pool of frozen-world workers, and the run directory
    every finished episode is appended to (one writer: its lock is held while serving)."""

    def __init__(
        self,
        spec_path: str | Path,
        *,
        out: str | Path | None = None,
        model: str = DEFAULT_MODEL,
        workers: int = 1,
        split: str = "heldout",
    ) -> None:
        if split not in SPLITS:
            raise UserError(f"--split must be heldout or train, not {split!r}")
        if not model.strip():
            raise UserError("--model is empty: name the policy the records are made for")
        if workers < 1:
            raise UserError("--workers must be at least 1")
        self.prepared: Environment = load_environment(
            spec_path, purpose="run", world_checks="workers"
        )
        loaded = self.prepared.loaded
        self.model = model
        self.split = split
        if split == "train":
            if loaded.spec.train_inputs is None:
                raise UserError(
                    "--split train: the spec has no train_inputs", where=self.prepared.where()
                )
            self.inputs = load_inputs(
                loaded.source_path(loaded.spec.train_inputs),
                templated=loaded.spec.prompt is not None,
                rows=loaded.spec.train_inputs.dataset is not None,
            )
        else:
            self.inputs = self.prepared.inputs
        self.by_id = {record.id: record for record in self.inputs}
        self.tools = tool_schemas(loaded)
        self.run_dir = Path(out) if out else default_run_dir(loaded.spec.name, f"served-{model}")
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs
        self.rollouts: dict[str, int] = {}
        self.served: set[int] = set()
        self.turn_robin = 0
        self.episodes: dict[str, Episode] = {}  # by episode id (the HTTP path's sessions)
        self.written = 0
        self._stack = ExitStack()
        self.meta = self._meta()
        try:
            self._stack.enter_context(_run_dir_lock(self.run_dir, False))
            _open_run_dir(self.run_dir, self.meta, False)
            self.results = self.run_dir / "results.jsonl"
            self.writer = ResultsWriter(self.results)
            self._stack.callback(self.writer.close)
            # a judge in record_missing / live mode: its judgments are made here, outside the
            # world, as `rlenv run` makes them (logged in the run directory; closed first)
            self.judges = Judges(loaded, {r.id: r.data for r in self.inputs}, self.run_dir)
            self._stack.callback(self.judges.services.stop)
            self._stack.callback(self.judges.close)
            self.work_root = Path(tempfile.mkdtemp(prefix="rlenv-serve-"))
            self._stack.callback(shutil.rmtree, self.work_root, True)
            config = WorkerConfig(
                spec_path=str(loaded.path),
                work_root=str(self.work_root),
                allowed_endpoints=list(self.prepared.reward_endpoints),
                split=split,
                empty_workdir=loaded.snapshot_path is None,
                world_checks={"purpose": "run", "model": None, "defer_expensive": False},
            )
            self.executor: Executor = make_executor("local", config, workers)
            self._stack.callback(self.executor.close)
        except BaseException:
            self._stack.close()
            raise

    def _meta(self) -> dict[str, Any]:
        spec = self.prepared.loaded.spec
        return {
            "env": {
                "name": spec.name,
                "version": spec.version,
                "fingerprint": self.prepared.fingerprint,
            },
            "model": {"uri": self.model},
            "decoding": spec.decoding.model_dump(),
            # episodes per input are the trainer's choice: no fixed K (check reads no gaps)
            "rollouts_per_input": None,
            "limit": None,
            "inputs": len(self.inputs),
            "input_indices": [],  # the inputs served so far (written again with the summary)
            "reference": None,
            "spec": str(self.prepared.loaded.path),
            "world": world_modes("local"),
            "expensive_fraction": 1.0,
            "deferred_expensive": False,
            "executor": "local",
            "served": {"split": self.split},
            **(
                {"judges": describe_judges(self.prepared.loaded)}
                if any(v.judge is not None for v in spec.verifiers)
                else {}
            ),
        }

    def describe(self) -> dict[str, Any]:
        return dict(self.meta["env"])

    # -- episodes -----------------------------------------------------------------------------

    def choose(self, input_id: str | None, seed: int | None) -> EnvInput:
        """The input of a new episode: the one named, else the seed's (seed mod the number of
        inputs), else the next in order (round robin)."""
        if input_id is not None:
            if not isinstance(input_id, str) or input_id not in self.by_id:
                split = "training" if self.split == "train" else "held-out"
                raise ServeError(f"unknown input_id {input_id!r}: no {split} input has that id")
            return self.by_id[input_id]
        if not self.inputs:
            raise ServeError("the env has no inputs to serve")
        if seed is not None:
            return self.inputs[seed % len(self.inputs)]
        record = self.inputs[self.turn_robin % len(self.inputs)]
        self.turn_robin += 1
        return record

    def open(self, episode_id: str, input_id: str | None, seed: int | None) -> Episode:
        record = self.choose(input_id, seed)
        rollout = self.rollouts.get(record.id, 0)
        self.rollouts[record.id] = rollout + 1
        seed_of = derive_seed(self.prepared.loaded.spec.seed, record.id, rollout)
        return Episode(self, episode_id, record, RolloutTask(record.index, rollout), seed_of)

    async def judged(self, record: RolloutRecord) -> RolloutRecord:
        """The record with the judgments its world left pending made (in a thread: a judge
        is a model call, and other episodes go on meanwhile)."""
        if not self.judges:
            return record
        settled = await asyncio.to_thread(self.judges.settle, dict(record))
        return cast(RolloutRecord, settled)

    def write(self, record: RolloutRecord) -> None:
        self.writer.write(record)
        self.served.add(int(record["input_index"]))
        self.written += 1

    # -- the run directory ----------------------------------------------------------------------

    def summarise(self) -> dict[str, Any]:
        """run.json (with the inputs served) and summary.json from results.jsonl, as `rlenv
        run` writes them, so report, compare and check read a served session as a run."""
        self.meta["input_indices"] = sorted(self.served)
        atomic_write(self.run_dir / "run.json", _pretty(self.meta_with_version()))
        summary = build_summary(
            self.prepared, self.meta, iter_results(self.results), self.model, str(self.results)
        )
        judged = judges_block(self.meta, self.run_dir)
        if judged is not None:
            summary["judges"] = judged
        summary = seal_run_json(summary, self.run_dir)  # run.json's digest: readers check it
        atomic_write(self.run_dir / "summary.json", _pretty(summary))
        return summary

    def meta_with_version(self) -> dict[str, Any]:
        from rlenv.version import __version__

        return {**self.meta, "rlenv_version": __version__}

    def close(self) -> None:
        for episode in list(self.episodes.values()):
            episode.cancel()
        self._stack.close()


def iter_records(path: Path) -> Iterator[RolloutRecord]:
    """The run directory's records (for tests and the bench)."""
    return iter_results(path)


__all__ = [
    "DEFAULT_MODEL",
    "Episode",
    "FixtureMiss",
    "ModelOutputError",
    "ServeError",
    "ServedWorld",
    "Step",
    "Trajectory",
    "composite_reward",
    "model_reply",
]
