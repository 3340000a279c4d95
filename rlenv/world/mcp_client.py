"""Reaching an MCP server with the `mcp` SDK: list its tools, make one `tools/call`.

Used by `validate` and `record` (`rlenv.world.mcp`), and run as `python -m
rlenv.world.mcp_client` for each live call a recording worker makes (a fresh interpreter: the
SDK's event loop needs the real monotonic clock). It imports nothing of the spec, replay or
scrubbing, so that child starts with the SDK alone; `jsonschema` (which the SDK's client
imports to check a tool's structured result) comes without the grammars of its ``iri`` format
(`rlenv.json_schema`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rlenv.errors import UserError

CONNECT_TIMEOUT_S = 60.0


class Server(Protocol):
    """What reaching a server needs of it: `rlenv.spec.McpServer`, or its fields in a child."""

    @property
    def command(self) -> list[str] | None: ...

    @property
    def url(self) -> str | None: ...


def server_label(server: Server) -> str:
    return server.url if server.url else " ".join(server.command or [])


def _client(server: Server, root: Path) -> Any:
    from rlenv.json_schema import load_jsonschema

    load_jsonschema()  # before the SDK imports it: ~4 s of grammars no tool result needs
    try:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError:
        raise UserError("MCP tools need the mcp SDK: pip install 'rlenv[mcp]'") from None
    if server.url:
        return Client(server.url, mode="legacy", cache=None)
    command = server.command or []
    executable = sys.executable if command[0] == "python" else command[0]  # as services do
    params = StdioServerParameters(
        command=executable, args=command[1:], env=dict(os.environ), cwd=str(root)
    )
    return Client(params, mode="legacy", cache=None)


def _reach(server: Server, root: Path, work: Callable[[Any], Any]) -> Any:
    """Run `work(client)` (a coroutine function) on a fresh connection to the server; a server
    that cannot be started or reached is one UserError line."""
    import anyio

    async def main() -> Any:
        with anyio.fail_after(CONNECT_TIMEOUT_S):
            async with _client(server, root) as client:
                return await work(client)

    try:
        return anyio.run(main)
    except UserError:
        raise
    except BaseException as exc:  # the SDK wraps failures in exception groups
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        if isinstance(exc, KeyboardInterrupt):
            raise
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise UserError(
            f"MCP server {server_label(server)!r} cannot be reached: {type(exc).__name__}: {detail}"
        ) from None


def list_server_tools(server: Server, root: Path) -> list[dict[str, Any]]:
    """The server's tools (name, description, inputSchema), as `tools/list` gives them."""

    async def work(client: Any) -> list[dict[str, Any]]:
        listed = await client.list_tools()
        return [
            tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools
        ]

    listed: list[dict[str, Any]] = _reach(server, root, work)
    return listed


def call_server_tool(
    server: Server, root: Path, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """One live `tools/call`: its result's content, structuredContent and isError."""

    async def work(client: Any) -> dict[str, Any]:
        result = await client.call_tool(name, arguments)
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        kept = ("content", "structuredContent", "isError")
        return {key: dumped[key] for key in kept if key in dumped}

    result: dict[str, Any] = _reach(server, root, work)
    return result


def _main() -> int:
    """`python -m rlenv.world.mcp_client`: one live call, the request on stdin (the server as
    `McpServer.model_dump()` gives it, already validated), the result on stdout."""
    from types import SimpleNamespace

    request = json.loads(sys.stdin.read())
    server = SimpleNamespace(
        command=request["server"].get("command"), url=request["server"].get("url")
    )
    try:
        result = call_server_tool(
            server, Path(request["root"]), request["tool"], request["arguments"]
        )
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
