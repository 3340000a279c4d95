"""What a process that imports env code leaves out of the libraries env code imports.

httpx imports its command-line client (``httpx._main``: rich, pygments, click; ~0.35 s of CPU
and ~5 MB) whenever those libraries are installed, although no env code runs httpx's command
line. A frozen-world worker and the checking child install `leave_out_httpx_cli` before they
import any env module, so httpx, whoever imports it (env code, or vcrpy to patch it for tool
replay), loads with its stub `httpx.main`, as it does where the client's libraries are not
installed. Env code that imports ``httpx._main`` itself, once httpx is loaded, still gets it.
"""

from __future__ import annotations

import sys


class _NoHttpxCli:
    """A meta-path finder that makes httpx's own ``from ._main import main`` (run while httpx
    initialises) fail with ImportError, which httpx answers with its stub."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "httpx._main":
            parent = sys.modules.get("httpx")
            if getattr(getattr(parent, "__spec__", None), "_initializing", False):
                raise ImportError("httpx's command-line client is not loaded in a frozen world")
        return None


def leave_out_httpx_cli() -> None:
    """Install the finder (once per process)."""
    if not any(isinstance(finder, _NoHttpxCli) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoHttpxCli())


__all__ = ["leave_out_httpx_cli"]
