"""The agent loop in the OpenAI chat format, shared by every provider.

Written once as a coroutine: providers outside the frozen world await real I/O; in-world
providers are synchronous and the coroutine is driven to completion with `run_sync`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rlenv.bounds import bounds_problem, reply_problem
from rlenv.canonical import MAX_DEPTH
from rlenv.errors import FixtureMiss, InfraError, ModelOutputError, PolicyCrash
from rlenv.providers.base import ModelReply
from rlenv.results import ToolCallRecord

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec_user import SimulatedUser

T = TypeVar("T")


class RolloutTimeout(Exception):
    """The rollout ran past the spec's per-rollout timeout."""


class ToolCrash(Exception):
    """A tool tried to end its process (SystemExit, KeyboardInterrupt or another
    BaseException): the rollout ends as ``tool_error``. A tool raising an ordinary Exception is
    answered to the model as an ``error: ...`` tool message instead (a tool's way to say no)."""

    def __init__(self, message: str, frames: list[str] | None = None) -> None:
        super().__init__(message)
        self.frames = frames or []


@dataclass
class ToolOutcome:
    content: str
    fixture: str  # "hit" | "miss" | "fallback" | "none"
    ok: bool
    error: str | None = None  # the tool itself raised (not a bad call by the model)
    traceback: list[str] = field(default_factory=list)  # the env's frames of that error
    unreachable: bool = False  # ... because a connection could not be made


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    status: str = "ok"
    error: str | None = None
    traceback: list[str] = field(default_factory=list)  # the env's frames of `error`
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )
    logprobs: list[Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    kl_parts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answer(self) -> str | None:
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                content = message.get("content")
                return content if isinstance(content, str) else None
        return None


ModelCall = Callable[[list[dict[str, Any]], int], Awaitable[ModelReply]]
ToolCall = Callable[[dict[str, Any], int], Awaitable[ToolOutcome]]
UserCall = Callable[[list[dict[str, Any]], int], Awaitable[str | None]]
"""The simulated user's next message given the conversation so far and its turn number (from
1); None: the user has nothing more to say."""


def parse_arguments(raw: str) -> dict[str, Any]:
    """A tool call's arguments: a JSON object of bounded data (`rlenv.bounds`), or ValueError
    saying what is wrong (the model is answered with it as the tool's error)."""
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError(f"arguments are nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise ValueError(f"arguments are not valid JSON ({str(exc).split(';')[0]})") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    problem = bounds_problem(value, finite=True)  # a NaN the tool saw would be null in the record
    if problem is not None:
        raise ValueError(f"arguments {problem}")
    return value


async def rollout_loop(
    messages: list[dict[str, Any]],
    max_turns: int,
    call_model: ModelCall,
    call_tool: ToolCall,
    *,
    first_turn: int = 0,
) -> Trajectory:
    """Alternate model turns and tool calls until a final answer, a limit or a failure
    (`first_turn`: turns numbered from there, within `max_turns` in all: a conversation's
    later stretches, `rlenv.worker.conversation`)."""
    trajectory = Trajectory(messages=[dict(message) for message in messages])
    try:
        for turn in range(first_turn, max_turns):
            reply = await call_model(trajectory.messages, turn)
            problem = reply_problem(reply.message) or bounds_problem(
                {"usage": reply.usage, "logprobs": reply.logprobs, "extra": reply.extra}
            )
            if problem is not None:  # any provider's: nothing unbounded reaches the record
                raise ModelOutputError(f"the model's reply {problem}")
            for key, value in reply.usage.items():
                if isinstance(value, int):
                    trajectory.usage[key] = trajectory.usage.get(key, 0) + value
            if reply.logprobs is not None:
                trajectory.logprobs = (trajectory.logprobs or []) + [
                    {"turn": turn, "tokens": reply.logprobs}
                ]
            if "kl" in reply.extra:
                trajectory.kl_parts.append(reply.extra["kl"])
            turn_extra = {key: value for key, value in reply.extra.items() if key != "kl"}
            if turn_extra:
                trajectory.extra.setdefault("turns", []).append({"turn": turn, **turn_extra})
            message = reply.message
            trajectory.messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return trajectory
            for call in calls:
                outcome = await call_tool(call, turn)
                function = call["function"]
                try:
                    arguments: Any = parse_arguments(function.get("arguments", ""))
                except ValueError:
                    arguments = function.get("arguments")
                record: ToolCallRecord = {
                    "turn": turn,
                    "id": call["id"],
                    "name": function["name"],
                    "arguments": arguments,
                    "fixture": outcome.fixture,
                    "ok": outcome.ok,
                }
                if outcome.error is not None:  # the tool raised (other records stay as they were)
                    record["error"] = outcome.error
                    if outcome.traceback:
                        record["traceback"] = outcome.traceback
                    if outcome.unreachable:
                        record["unreachable"] = True
                trajectory.tool_calls.append(record)
                trajectory.messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "name": function["name"],
                        "content": outcome.content,
                    }
                )
        trajectory.status = "max_turns"
        trajectory.error = f"no final answer within {max_turns} turns"
    except InfraError as exc:
        trajectory.status, trajectory.error = "infra_error", str(exc)
    except ModelOutputError as exc:
        trajectory.status, trajectory.error = "model_error", str(exc)
    except FixtureMiss as exc:
        trajectory.status, trajectory.error = "fixture_miss", str(exc)
    except ToolCrash as exc:
        trajectory.status, trajectory.error = "tool_error", str(exc)
        trajectory.traceback = exc.frames
    except PolicyCrash as exc:  # the trajectory up to the crash is kept
        trajectory.status, trajectory.error = "policy_error", str(exc)
        trajectory.traceback = exc.frames
    except RolloutTimeout as exc:
        trajectory.status, trajectory.error = "timeout", str(exc) or "rollout timed out"
    return trajectory


async def conversation_loop(
    messages: list[dict[str, Any]],
    user: SimulatedUser,
    max_turns: int,
    call_model: ModelCall,
    call_tool: ToolCall,
    call_user: UserCall,
) -> Trajectory:
    """Agent turns and user turns, alternating, until the user or a limit ends it. The same
    loop whether the policy is in the world (`call_user` answers in the same process) or
    outside it (`call_user` is a call to a frozen-world worker, as a tool call is)."""
    trajectory = Trajectory(messages=[dict(message) for message in messages])
    user_turns: list[dict[str, Any]] = []
    trajectory.extra["user_turns"] = user_turns
    turn = 0
    for user_turn in range(1, user.max_turns + 2):
        part = await rollout_loop(
            trajectory.messages, max_turns, call_model, call_tool, first_turn=turn
        )
        turn += sum(
            1 for m in part.messages[len(trajectory.messages) :] if m.get("role") == "assistant"
        )
        _absorb(trajectory, part)
        if part.status != "ok" or user_turn > user.max_turns:
            return trajectory
        try:
            said = await call_user(trajectory.messages, user_turn)
        except FixtureMiss as exc:
            trajectory.status, trajectory.error = "fixture_miss", str(exc)
            return trajectory
        except ToolCrash as exc:
            trajectory.status, trajectory.error = "tool_error", str(exc)
            trajectory.traceback = exc.frames
            return trajectory
        ended = said is None or user.stop in said
        text = (said or "").replace(user.stop, "").strip()
        user_turns.append({"user_turn": user_turn, "after_turn": turn - 1, "content": text})
        if ended:
            user_turns[-1]["ended"] = True
            return trajectory
        trajectory.messages.append({"role": "user", "content": text})
    return trajectory  # pragma: no cover - the loop returns at the user's last turn


def _absorb(trajectory: Trajectory, part: Trajectory) -> None:
    """One agent stretch's messages, tool calls, usage and status into the conversation's."""
    trajectory.messages = part.messages
    trajectory.tool_calls += part.tool_calls
    for key, value in part.usage.items():
        trajectory.usage[key] = trajectory.usage.get(key, 0) + value
    if part.logprobs is not None:
        trajectory.logprobs = (trajectory.logprobs or []) + part.logprobs
    trajectory.kl_parts += part.kl_parts
    for key, value in part.extra.items():
        trajectory.extra.setdefault(key, []).extend(value)
    trajectory.status, trajectory.error, trajectory.traceback = (
        part.status,
        part.error,
        part.traceback,
    )


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (all its awaits are synchronous) to its result."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("run_sync: coroutine suspended; in-world calls must be synchronous")
