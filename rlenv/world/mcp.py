"""MCP tools: a spec tool served by an MCP server (a stdio command or a streamable HTTP URL).

`validate` lists the server's tools (`list_server_tools`); `record` calls the server for each
`tools/call` and keeps the request and the result, scrubbed as tool HTTP is, as one JSON line
per distinct call in the tool's cassette (`McpTool` live, then `merge_recording`); `run`
answers each call from that cassette and never starts or reaches the server: a call that was
never recorded is a fixture miss naming the tool and its arguments, or the tool's declared
`on_miss` fallback. The `mcp` SDK (`pip install 'rlenv[mcp]'`) is imported only to reach a
server, never to replay.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.canonical import canonical_bytes, sha256_json
from rlenv.errors import UserError
from rlenv.jsonl import parse_json_line
from rlenv.world.mcp_client import call_server_tool, list_server_tools, server_label
from rlenv.world.replay import FixtureEvent, miss_error
from rlenv.world.scrub import Scrubber

if TYPE_CHECKING:
    from rlenv.spec import LoadedSpec, McpServer, Tool

__all__ = [
    "McpTool",
    "McpToolError",
    "call_server_tool",
    "cassette_findings",
    "check_mcp_servers",
    "list_server_tools",
    "merge_recording",
    "server_label",
]

_SHOWN_ARGUMENTS = 300  # characters of a missed call's arguments in its error


class McpToolError(Exception):
    """The MCP server answered the call with `isError`: its text is the tool's error."""


def check_mcp_servers(loaded: LoadedSpec) -> dict[str, list[str]]:
    """Each MCP server the spec's tools name, reached once: its tools' names by server; a
    server that cannot be reached, lacks a tool the spec names, or whose tool's inputSchema
    differs from the `parameters` the spec gives it (the schema the model is shown and the
    cassette's calls were made with) is a UserError (exit 2)."""
    listed: dict[str, dict[str, dict[str, Any]]] = {}
    for index, tool in enumerate(loaded.spec.tools):
        if tool.mcp is None:
            continue
        label = server_label(tool.mcp)
        if label not in listed:
            tools = list_server_tools(tool.mcp, loaded.root)
            listed[label] = {str(item["name"]): item for item in tools}
        wanted = tool.mcp.tool or tool.name
        if wanted not in listed[label]:
            raise UserError(
                f"tools[{index}].mcp: the server has no tool {wanted!r}"
                f" (it lists: {', '.join(listed[label]) or 'none'})",
                where=str(loaded.path),
            )
        if "parameters" in tool.model_fields_set:
            served = listed[label][wanted].get("inputSchema")
            drift = first_difference(untitled(tool.parameters), untitled(served))
            if drift is not None:
                raise UserError(
                    f"tools[{index}].parameters: the MCP server's schema for {wanted!r} has"
                    f" changed: {drift} (the spec's parameters and its cassette were made for"
                    " the old one: copy the server's inputSchema into parameters and record"
                    " again)",
                    where=str(loaded.path),
                )
    return {label: list(tools) for label, tools in listed.items()}


def untitled(schema: Any) -> Any:
    """A JSON schema without its `title` annotations (the names SDKs generate from function
    arguments, `addArguments`, `A`), which a schema written by hand leaves out."""
    if isinstance(schema, list):
        return [untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
            value, dict
        ):  # a map of names to schemas: a property may be called "title"
            out[key] = {name: untitled(item) for name, item in value.items()}
        else:
            out[key] = untitled(value)
    return out


def first_difference(spec: Any, server: Any, path: str = "") -> str | None:
    """Where two JSON values first differ (`properties.b.type: the spec says 'string', the
    server 'integer'`), or None when they are equal."""
    where = path or "the schema"
    if isinstance(spec, dict) and isinstance(server, dict):
        for key in sorted(set(spec) | set(server), key=str):
            inner = f"{path}.{key}" if path else str(key)
            if key not in server:
                return f"{inner}: the spec has it, the server does not"
            if key not in spec:
                return f"{inner}: the server has {_shown(server[key])}, the spec does not"
            found = first_difference(spec[key], server[key], inner)
            if found is not None:
                return found
        return None
    if isinstance(spec, list) and isinstance(server, list):
        if len(spec) != len(server):
            return f"{where}: the spec says {_shown(spec)}, the server {_shown(server)}"
        for number, (left, right) in enumerate(zip(spec, server, strict=True)):
            found = first_difference(left, right, f"{path}[{number}]")
            if found is not None:
                return found
        return None
    if canonical_bytes(spec) != canonical_bytes(server):
        return f"{where}: the spec says {_shown(spec)}, the server {_shown(server)}"
    return None


def _shown(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call_request(server_tool: str, arguments: dict[str, Any], scrubber: Scrubber) -> dict[str, Any]:
    """The request as the cassette keys it: the server's tool name and the scrubbed arguments
    (secret-named fields hidden, then every secret the scrubber knows replaced by value)."""
    return {"tool": server_tool, "arguments": redact(scrubber.json_value(arguments), scrubber)}


def redact(value: Any, scrubber: Scrubber) -> Any:
    """`value` with every secret the scrubber knows replaced, at any depth (keys included)."""
    if isinstance(value, dict):
        return {redact(key, scrubber): redact(item, scrubber) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, scrubber) for item in value]
    return scrubber.values.any(value)


def tool_value(result: dict[str, Any]) -> Any:
    """What the model is given for a result: its text (all-text content), else the content
    list; an `isError` result raises McpToolError with its text."""
    content = result.get("content") or []
    texts = [item.get("text", "") for item in content if item.get("type") == "text"]
    text = "\n".join(texts)
    if result.get("isError"):
        raise McpToolError(text or "the MCP tool reported an error")
    if len(texts) == len(content) and content:
        return text
    if not content and "structuredContent" in result:
        return result["structuredContent"]
    return content


def _cassette_line(line: str) -> Any:
    """One line of an MCP cassette, which rlenv wrote canonically: a double past 2**53 (1e20,
    written 100000000000000000000) is read back as that double, not as an integer canonical
    JSON cannot hold; NaN, infinities and other integers past 2**53 are refused."""
    return parse_json_line(line, own_file=True)


def load_cassette(path: Path | None) -> dict[str, dict[str, Any]]:
    """An MCP cassette (JSON lines `{key, request, result}`) as key -> result."""
    if path is None or not path.is_file():
        return {}
    entries: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = _cassette_line(line)
            entries[str(entry["key"])] = dict(entry["result"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"MCP cassette line {number} is not {{key, request, result}} JSON: {exc}",
                where=str(path),
            ) from None
    return entries


class McpTool:
    """An MCP tool in the world, called as a python tool is (`tool(arguments, ctx)`): replayed
    from its cassette, or (recording) called live and appended to `record_path`."""

    def __init__(
        self,
        tool: Tool,
        root: Path,
        cassette: Path | None,
        scrubber: Scrubber,
        record_path: Path | None = None,
    ) -> None:
        assert tool.mcp is not None
        self.name = tool.name
        self.server = tool.mcp
        self.server_tool = tool.mcp.tool or tool.name
        self.root = root
        self.scrubber = scrubber
        self.record_path = record_path
        self.fallback = None if tool.on_miss == "error" else tool.on_miss.body
        self.results = {} if record_path else load_cassette(cassette)
        self.events: list[FixtureEvent] = []

    def take_events(self) -> list[FixtureEvent]:
        events, self.events = self.events, []
        return events

    def __call__(self, arguments: dict[str, Any], ctx: Any) -> Any:
        request = call_request(self.server_tool, arguments, self.scrubber)
        key = sha256_json(request)
        if self.record_path is not None:
            return tool_value(self._record(key, request, arguments))
        result = self.results.get(key)
        if result is not None:
            self.events.append(FixtureEvent(self.name, "hit", "MCP", self.server_tool))
            return tool_value(result)
        shown = canonical_bytes(request["arguments"]).decode("utf-8")
        if len(shown) > _SHOWN_ARGUMENTS:
            shown = shown[: _SHOWN_ARGUMENTS - 3] + "..."
        if self.fallback is not None:
            self.events.append(FixtureEvent(self.name, "fallback", "MCP", self.server_tool))
            return self.fallback
        event = FixtureEvent(self.name, "miss", "MCP tools/call", f"{self.server_tool} {shown}")
        self.events.append(event)
        raise miss_error(self.name, event)

    def _record(self, key: str, request: dict[str, Any], arguments: dict[str, Any]) -> Any:
        assert self.record_path is not None
        result = _call_in_child(self.server, self.root, self.server_tool, arguments)
        result = redact(result, self.scrubber)
        line = canonical_bytes({"key": key, "request": request, "result": result}) + b"\n"
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.record_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(descriptor, line)  # one write per line: workers append side by side
        finally:
            os.close(descriptor)
        return result


def _call_in_child(
    server: McpServer, root: Path, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """A live call from a worker, made by a fresh interpreter: the SDK's event loop needs the
    real monotonic clock, which freezegun holds still in the worker. The child runs
    `rlenv.world.mcp_client`, which imports the SDK and nothing of the spec or replay."""
    import subprocess

    request = {"server": server.model_dump(), "root": str(root), "tool": name}
    request["arguments"] = arguments
    done = subprocess.run(
        [sys.executable, "-m", "rlenv.world.mcp_client"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:  # the server is down: `record` refuses the recording
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise ConnectionError(lines[-1])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def merge_recording(
    recorded: Path, target: Path, scrubber: Scrubber, *, keep: bool = True
) -> tuple[int, int]:
    """Fold a recording's calls into the MCP cassette (one line per key, sorted; `keep`: the
    cassette's earlier calls stay), every secret the scrubber knows replaced by value once
    more; return (calls, new). Written atomically."""
    from rlenv.files import atomic_write

    entries: dict[str, bytes] = {}
    if keep and target.is_file():
        load_cassette(target)  # a broken cassette is refused, not folded in
        for line in target.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entries[_cassette_line(line)["key"]] = line.encode("utf-8") + b"\n"
    before = len(entries)
    for line in recorded.read_text(encoding="utf-8").splitlines() if recorded.is_file() else []:
        if line.strip():
            entry = redact(_cassette_line(line), scrubber)
            entries.setdefault(entry["key"], canonical_bytes(entry) + b"\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, b"".join(entries[key] for key in sorted(entries)))
    return len(entries), len(entries) - before


def cassette_findings(path: Path, scrubber: Scrubber) -> list[str]:
    """detect-secrets findings in an MCP cassette, as `validate` reports a tool HTTP cassette's."""
    from types import SimpleNamespace

    from rlenv.world.secrets import scan

    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        if line.strip():
            entry = _cassette_line(line)
            request = SimpleNamespace(
                uri=f"mcp:tools/call/{entry['request'].get('tool', '')}",
                headers={},
                body=json.dumps(entry["request"].get("arguments"), sort_keys=True),
            )
            response = {"headers": {}, "body": {"string": json.dumps(entry["result"])}}
            pairs.append((request, response))
    return [finding.message() for finding in scan(pairs, "REDACTED")]
