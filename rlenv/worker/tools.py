"""Tools in the frozen world: what a tool function is given (`ToolContext`), the spec's tools
as the model sees them, and how a tool call's errors and fixture use are judged."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.errors import FixtureMiss
from rlenv.spec import LoadedSpec
from rlenv.world.replay import FixtureEvent


@dataclass
class ToolContext:
    seed: int
    rng: Any
    input_id: str
    rollout: int
    workdir: Path
    turn: int
    services: dict[str, str] = field(default_factory=dict)  # name -> logical base URL


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


def describe(exc: BaseException) -> str:
    """``SystemExit: 0``: the exception's type and message, for a record's error."""
    return f"{type(exc).__name__}: {exc}"


def unreachable(exc: BaseException) -> bool:
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


def fixture_use(name: str, events: list[FixtureEvent]) -> str:
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
