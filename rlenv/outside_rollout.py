"""A rollout whose policy is outside the frozen world (an API model, a local checkpoint): its
model calls made here, in the orchestrator; its tool calls, a simulated user's turns and its
grading in a worker (`rlenv.runner` runs these beside the in-world batches)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlenv.agent import RolloutTimeout, ToolOutcome, Trajectory, conversation_loop, rollout_loop
from rlenv.clock import monotonic
from rlenv.env import Environment
from rlenv.errors import InfraError, WorkerLost
from rlenv.executors import Executor
from rlenv.providers.base import ModelReply, Provider
from rlenv.results import RolloutRecord
from rlenv.seeding import derive_seed
from rlenv.worker.config import RolloutTask
from rlenv.worker.policy_calls import json_copy, numbered_tool_calls, request_maker
from rlenv.worker.timers import timeout_message
from rlenv.worker.tools import tool_schemas


@dataclass(frozen=True)
class RunConstants:
    """What every outside rollout of a run starts from, made once per run (a pydantic dump
    and the tools' schemas per rollout were a share of the orchestrator's CPU at 256 in
    flight); each rollout gets its own copies (`json_copy`), as it got fresh ones before."""

    tools: list[dict[str, Any]]
    decoding: dict[str, Any]

    @classmethod
    def of(cls, prepared: Environment) -> RunConstants:
        spec = prepared.loaded.spec
        return cls(tool_schemas(prepared.loaded), spec.decoding.model_dump())


async def outside_conversation(
    prepared: Environment,
    provider: Provider,
    executor: Executor,
    task: RolloutTask,
    shared: RunConstants | None = None,
) -> tuple[Trajectory, float]:
    """A rollout's conversation: model calls here, tool calls and a simulated user's turns in
    a worker. Its trajectory and the seconds its grading has left (`executor.finish`: grading
    is part of the rollout's time; a timed-out rollout is not graded)."""
    spec = prepared.loaded.spec
    shared = shared or RunConstants.of(prepared)
    record = prepared.inputs[task.input_index]
    seed = derive_seed(spec.seed, record.id, task.rollout)
    messages = record.messages(spec.system_prompt, spec.prompt)
    request = request_maker(
        json_copy(shared.tools), json_copy(shared.decoding), seed, record.id, task.rollout
    )

    def remaining() -> float:
        left = deadline - monotonic()
        if left <= 0:
            raise RolloutTimeout(timeout_message(spec.limits.timeout_s))
        return left

    async def call_model(current: list[dict[str, Any]], turn: int) -> ModelReply:
        made = request(current, turn)
        left = remaining()
        try:  # (not wait_for: a task of its own per call)
            async with asyncio.timeout(left):
                return await provider.complete(made)
        except TimeoutError:
            raise RolloutTimeout(timeout_message(spec.limits.timeout_s)) from None

    async def call_tool(call: dict[str, Any], turn: int, number: int) -> ToolOutcome:
        return await executor.tool(task, call, turn, number, remaining())

    async def call_user(current: list[dict[str, Any]], user_turn: int) -> str | None:
        return await executor.user(task, current, user_turn, remaining())

    await executor.prepare(task)
    deadline = monotonic() + spec.limits.timeout_s  # from when a worker took the rollout
    tools, turns = numbered_tool_calls(call_tool), spec.limits.max_turns
    try:
        if spec.user is None:
            trajectory = await rollout_loop(messages, turns, call_model, tools)
        else:  # the user's turns are made in a worker, as tool calls are
            trajectory = await conversation_loop(
                messages, spec.user, turns, call_model, tools, call_user
            )
    except InfraError as exc:  # pragma: no cover - rollout_loop classifies these
        trajectory = Trajectory(messages=messages, status="infra_error", error=str(exc))
    except RolloutTimeout:  # in a user's turn (the agent loop classifies its own)
        trajectory = Trajectory(messages=messages, status="timeout")
    left = deadline - monotonic()
    if left <= 0:  # the worker makes the timeout record (and removes the workdir)
        trajectory = Trajectory(messages=messages, status="timeout")
    return trajectory, max(left, 0.0)


async def run_outside(
    prepared: Environment,
    provider: Provider,
    executor: Executor,
    queue: Iterator[RolloutTask],
    conversing: int,
    grading: int,
    done: Callable[[RolloutTask, RolloutRecord | WorkerLost, float], None],
) -> None:
    """The rollouts of `queue`, `conversing` of them in conversation at a time; each one's
    record (or the `WorkerLost` its worker left) to `done(task, record, started)`.

    With `grading` > 0, a rollout's grading does not hold its place: the next conversation
    starts as it is graded, and up to `grading` rollouts may wait for a worker's grading or be
    in it (a conversation that ends with as many waiting waits too). At 256 rollouts in flight
    at 100 ms, the finish's round trip held each place ~5 % of the time: the model server was
    sent that much less. Only for conversations that need no worker (no tools, no simulated
    user): where they do, a grading that held a worker longer (a slow verifier) would starve
    the next conversations' tool calls, which wait for a worker in their own time, and time
    them out (tests/test_hard_limits.py). With `grading` 0, a rollout holds its place until it
    is graded. What a grading raises (but a lost worker) ends the run, raised as it is."""
    shared = RunConstants.of(prepared)
    room = asyncio.Semaphore(max(grading, 1))
    graders: set[asyncio.Task[None]] = set()
    failed: list[Exception] = []

    async def graded(
        task: RolloutTask, trajectory: Trajectory, left: float, started: float
    ) -> None:
        try:
            record = await executor.finish(task, trajectory, provider.uri, left)
        except WorkerLost as lost:
            done(task, lost, started)
        else:
            done(task, record, started)

    def ended(grader: asyncio.Task[None]) -> None:
        graders.discard(grader)
        room.release()
        if not grader.cancelled() and grader.exception() is not None:
            failed.append(grader.exception())  # type: ignore[arg-type]

    async def consumer() -> None:
        for task in queue:
            if failed:
                raise failed[0]
            started = monotonic()
            try:
                trajectory, left = await outside_conversation(
                    prepared, provider, executor, task, shared
                )
            except WorkerLost as lost:
                done(task, lost, started)
                continue
            if not grading:
                await graded(task, trajectory, left, started)
                continue
            await room.acquire()
            grader = asyncio.ensure_future(graded(task, trajectory, left, started))
            graders.add(grader)
            grader.add_done_callback(ended)

    await asyncio.gather(*(consumer() for _ in range(conversing)))
    while graders:  # the last gradings, waited for once (not by every consumer: N x N waits)
        await asyncio.wait(list(graders))
    if failed:
        raise failed[0]
