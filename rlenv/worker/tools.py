"""Tools in the frozen world: what a tool function is given (`ToolContext`), the spec's tools
as the model sees them, and how a tool call's errors and fixture use are judged."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.agent import RolloutTimeout, ToolCrash, ToolOutcome, parse_arguments
from rlenv.bounds import OutOfBounds, tool_content
from rlenv.errors import env_frames
from rlenv.providers.base import import_ref
from rlenv.worker.config import WorkerConfig

if TYPE_CHECKING:  # replay, scrubbing and MCP are imported by a world that has tools (~40 ms)
    from rlenv.spec import LoadedSpec, Tool
    from rlenv.world.mcp import McpTool
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


def keeps_error_responses(loaded: LoadedSpec) -> bool:
    """Whether `rlenv record` keeps error responses (HTTP >= 400, empty bodies): yes unless
    the spec says ``scrub: {record_errors: false}``."""
    scrub = loaded.spec.scrub
    return scrub is None or scrub.record_errors


def fixture_use(name: str, events: list[FixtureEvent]) -> str:
    """How a tool call used its fixtures: hit, fallback or none; a miss ends the rollout even
    if the tool caught the exception."""
    misses = [event for event in events if event.outcome == "miss"]
    if misses:
        from rlenv.world.replay import miss_error

        raise miss_error(name, misses[0])
    outcomes = {event.outcome for event in events}
    return "fallback" if "fallback" in outcomes else "hit" if "hit" in outcomes else "none"


def _validator(schema: dict[str, Any]) -> Any:
    """jsonschema's validator for a tool's parameters (imported now if it was not)."""
    from rlenv.json_schema import load_jsonschema

    jsonschema = load_jsonschema()
    return jsonschema.validators.validator_for(schema)(schema)


_PLAIN_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
    # jsonschema counts 1.0 as an integer too: such a value is left to it
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, int | float) and not isinstance(value, bool),
}
_ANNOTATIONS = frozenset({"description", "title"})


def plain_check(schema: Any) -> Callable[[dict[str, Any]], bool] | None:
    """For a plain object schema (``type: object``; ``properties`` each at most a single JSON
    type; ``required``; ``additionalProperties`` true or false; descriptions and titles; no
    ``$schema``, so jsonschema's latest draft), a check that passes only arguments jsonschema
    finds no error in. A failed check says nothing: jsonschema then finds the error, whose
    message the model is answered with. None for any other schema."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if not set(schema) <= {"type", "properties", "required", "additionalProperties"} | _ANNOTATIONS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(extra, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        return None
    types: dict[str, Callable[[Any], bool] | None] = {}
    for name, subschema in properties.items():
        if not isinstance(subschema, dict) or not set(subschema) <= {"type"} | _ANNOTATIONS:
            return None
        kind = subschema.get("type")
        if kind is not None and (not isinstance(kind, str) or kind not in _PLAIN_TYPES):
            return None
        types[name] = None if kind is None else _PLAIN_TYPES[kind]

    def check(arguments: dict[str, Any]) -> bool:
        for name in required:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            if name not in types:
                if not extra:
                    return False
                continue
            fits = types[name]
            if fits is not None and not fits(value):
                return False
        return True

    return check


class WorldTools:
    """The spec's tools in the world: each function imported once, a call checked against its
    tool's schema, run in the rollout's workdir (its HTTP replayed, or recorded by `rlenv
    record`), and its fixture use judged."""

    def __init__(
        self, loaded: LoadedSpec, config: WorkerConfig, sanitise: Callable[[str], str]
    ) -> None:
        self.loaded = loaded
        self.config = config
        self.sanitise = sanitise
        self.cassette: Any = None  # the replay cassette, once the world has entered it
        tools = loaded.spec.tools
        self.mcp_tools = {tool.name for tool in tools if not tool.function}
        self.functions = {
            tool.name: (
                import_ref(tool.function, what=f"tool {tool.name!r}")
                if tool.function
                else self._mcp_tool(tool)
            )
            for tool in tools
        }
        self.validators: dict[str, Any] = {}
        # a tool whose schema is plain (`plain_check`) is checked without jsonschema; jsonschema
        # is imported (~3 MB, a sixth of a one-tool worker's start) only for one whose schema is
        # not, or when a call's arguments do not pass the plain check (its message is needed)
        self.plain_checks: dict[str, Callable[[dict[str, Any]], bool]] = {}
        self._validators_wanted = False
        self.validators_loaded = False  # by `load_wanted`, since the template was last told
        self.schemas: list[dict[str, Any]] = []
        if not tools:
            return
        for tool in tools:
            check = plain_check(tool.parameters)
            if check is not None:
                self.plain_checks[tool.name] = check
            else:
                self.validators[tool.name] = _validator(tool.parameters)
        self.schemas = tool_schemas(loaded)

    def parse(self, call: dict[str, Any]) -> tuple[str, dict[str, Any]] | ToolOutcome:
        """The tool a call names and its arguments; or, for a call that names no tool or whose
        arguments do not fit the tool's schema, the error the model gets as the answer."""
        function = call.get("function") or {}
        name = function.get("name")
        if name not in self.functions:
            return ToolOutcome(f"error: unknown tool {name!r}", "none", False)
        try:
            arguments = parse_arguments(function.get("arguments", ""))
        except ValueError as exc:
            return ToolOutcome(f"error: {exc}", "none", False)
        plain = self.plain_checks.get(name)
        if plain is not None and plain(arguments):
            return name, arguments
        validator = self.validators.get(name)
        if validator is None:
            validator = self.validators[name] = _validator(self._parameters(name))
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            return ToolOutcome(f"error: invalid arguments: {errors[0].message}", "none", False)
        return name, arguments

    def after_rollout(self, calls: list[Any]) -> None:
        """Note a rollout's calls (in the worker that grades it): after one that failed (its
        arguments perhaps not fitting), while some tool is checked plainly, jsonschema is
        wanted in this worker (`load_wanted`)."""
        if len(self.validators) < len(self.functions) and any(not call["ok"] for call in calls):
            self._validators_wanted = True

    def load_wanted(self) -> None:
        """jsonschema's validators for every tool, built here once a rollout's call failed
        (`after_rollout`), before the next rollout (off its clock), so that the rollouts'
        children forked from here do not each import jsonschema (~3 MB, tens of ms) to word
        such an error."""
        if not self._validators_wanted:
            return
        self._validators_wanted = False
        self.load_validators()
        self.validators_loaded = True  # the template is told (`rlenv.worker.protocol`)

    def load_validators(self) -> None:
        """jsonschema's validator for every tool that has none yet."""
        for tool in self.loaded.spec.tools:
            if tool.name not in self.validators:
                self.validators[tool.name] = _validator(tool.parameters)

    def _parameters(self, name: str) -> dict[str, Any]:
        return next(tool.parameters for tool in self.loaded.spec.tools if tool.name == name)

    def run(self, name: str, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        """Run a parsed call in `context.workdir`; its fixture use judged (a miss raises)."""
        outcome, events = self._invoke(name, arguments, context)
        outcome.fixture = fixture_use(name, events)
        return outcome

    def _invoke(
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
                    result = self.functions[name](arguments, context)
                outcome = ToolOutcome(tool_content(name, result), "none", True)
            except RolloutTimeout:
                raise
            except OutOfBounds as exc:  # not data the rollout can keep: the tool's failure
                raise ToolCrash(str(exc)) from None
            except Exception as exc:  # a fixture miss is judged from the events
                error = self.sanitise(describe(exc))
                outcome = ToolOutcome(
                    f"error: {error}", "none", False, error, env_frames(exc), unreachable(exc)
                )
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: never the run's end
                raise ToolCrash(
                    self.sanitise(f"tool {name}: {describe(exc)}"), env_frames(exc)
                ) from None
            finally:
                if cassette is not None:
                    type(cassette).current = None
                    events = cassette.events[events_before:]
                    del cassette.events[events_before:]
                if name in self.mcp_tools:
                    events += self.functions[name].take_events()
        return outcome, events

    def _mcp_tool(self, tool: Tool) -> McpTool:
        """An MCP tool: replayed from its cassette, or recorded live into the record dir."""
        from rlenv.world.mcp import McpTool
        from rlenv.world.scrub import spec_scrubber

        record_dir = self.config.record_dir if self.config.live_tools else None
        return McpTool(
            tool,
            self.loaded.root,
            self.loaded.cassette_path(tool),
            spec_scrubber(self.loaded),
            Path(record_dir) / f"{tool.name}.mcp.jsonl" if record_dir else None,
        )

    def _recording(self, name: str) -> Any:
        """While recording, the tool's HTTP goes live through a vcrpy cassette that writes."""
        if not self.config.live_tools or not self.config.record_dir:
            return contextlib.nullcontext()
        from rlenv.world.recording import recording_cassette
        from rlenv.world.scrub import spec_scrubber

        return recording_cassette(
            Path(self.config.record_dir) / f"{name}.yaml",
            spec_scrubber(self.loaded),
            record_errors=keeps_error_responses(self.loaded),
        )
