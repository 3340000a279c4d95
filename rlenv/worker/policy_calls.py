"""How a rollout's loop calls its policy and its tools, the same whether the policy runs in the
frozen world (`rlenv.worker.runtime`) or outside it (the runner, with tools in a worker): the
model request of each turn, and tool calls numbered within their turn."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from rlenv.agent import ToolCall, ToolOutcome
from rlenv.providers.base import ModelRequest

RequestMaker = Callable[[list[dict[str, Any]], int], ModelRequest]


def request_maker(
    tools: list[dict[str, Any]],
    decoding: dict[str, Any],
    seed: int,
    input_id: str,
    rollout: int,
) -> RequestMaker:
    """The model request of each turn of one rollout (the conversation so far, turn): a copy
    of the messages, so what a policy does to its request never reaches the trajectory."""

    def request(current: list[dict[str, Any]], turn: int) -> ModelRequest:
        return ModelRequest(
            messages=json_copy(current),
            tools=tools,
            decoding=decoding,
            seed=seed,
            input_id=input_id,
            rollout=rollout,
            turn=turn,
        )

    return request


def numbered_tool_calls(
    call: Callable[[dict[str, Any], int, int], Awaitable[ToolOutcome]],
) -> ToolCall:
    """The rollout loop's tool caller: each call numbered within its turn (0, 1, ...; the
    number seeds the tool), then `call(tool_call, turn, number)`."""
    counters: dict[int, int] = {}

    async def call_tool(tool_call: dict[str, Any], turn: int) -> ToolOutcome:
        number = counters.get(turn, 0)
        counters[turn] = number + 1
        return await call(tool_call, turn, number)

    return call_tool


def json_copy(value: Any) -> Any:
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
