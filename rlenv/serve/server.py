"""Running the OpenEnv server of a frozen env: the port bound and the world built first (a
bad argument, spec or port is refused in a fraction of a second), then the app of
:mod:`rlenv.serve.app` (openenv-core, FastAPI, uvicorn) imported and served until SIGINT/SIGTERM.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.serve.episodes import ServedWorld


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on HOST:PORT (PORT 0: a free one), or UserError."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """SIGINT/SIGTERM stop the server gracefully and `serve` returns to write the summary
        (uvicorn would raise the signal again once stopped, ending the process first)."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    return Server


def serve(
    spec_path: str | Path,
    *,
    out: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 64,
    workers: int | None = None,
    model: str = "openenv",
    split: str = "heldout",
    announce: Any = None,
) -> dict[str, Any]:
    """Serve the env until interrupted (SIGINT/SIGTERM); then write summary.json and return
    it. `announce(url)` is called once the server listens."""
    if max_sessions < 1:
        raise UserError("--max-sessions must be at least 1")
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be 0..65535, not {port}")
    sock = bind(host, port)
    try:
        world = ServedWorld(
            spec_path, out=out, model=model, workers=workers or (os.cpu_count() or 1), split=split
        )
    except BaseException:
        sock.close()
        raise
    try:
        import uvicorn

        from rlenv.serve.app import WS_MAX_BYTES, make_app

        app = make_app(world, max_sessions)
        config = uvicorn.Config(
            app,
            log_level="warning",
            ws_max_size=WS_MAX_BYTES,
            ws_ping_interval=None,
            timeout_graceful_shutdown=5,
            lifespan="on",
        )
        server = _server_class()(config)
        bound_host, bound_port = sock.getsockname()[:2]
        if announce is not None:

            @app.on_event("startup")
            async def _announce() -> None:
                announce(f"http://{bound_host}:{bound_port}")

        server.run(sockets=[sock])
    finally:
        sock.close()
        try:
            summary = world.summarise()
        finally:
            world.close()
    sys.stdout.flush()
    return summary
