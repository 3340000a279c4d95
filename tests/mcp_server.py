"""A small MCP server for the MCP-tool tests, written with the `mcp` SDK.

`python mcp_server.py stdio` serves over stdin/stdout; `python mcp_server.py http PORT` serves
streamable HTTP on 127.0.0.1:PORT at /mcp. Each call is appended to $MCP_CALL_LOG (when set), so
a test can tell that `rlenv run` never started the server.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("rlenv-test")


def _log(line: str) -> None:
    path = os.environ.get("MCP_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _log(f"add {a} {b}")
    return a + b


@server.tool()
def whoami(token: str) -> str:
    """Echo who holds a token (the token is a secret the cassette must not keep)."""
    _log("whoami")
    return f"user for {token}"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
