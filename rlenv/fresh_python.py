"""A fresh interpreter for one of rlenv's own helper processes (the results writer, the
cassette indexer): ``python -P -c CODE``, rlenv imported from where this process has it.

A fresh interpreter, not a fork: a fork shares this process's pages only until either writes
them (the orchestrator rewrites its heap all run long), and what a fresh one imports and builds
is freed with it when it exits. Ground floor: imports nothing from rlenv.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any


def start_python(code: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``python -P -c code args...``: this interpreter, with this process's ``sys.path``
    as its PYTHONPATH (so rlenv comes from where it came here) and nothing from the working
    directory (``-P``). `popen`: the rest of `subprocess.Popen`'s arguments (``pass_fds``,
    ``stdin``...; not ``env``). OSError when no process can be had, or no interpreter (an
    embedded Python): the caller then does the work in its own process."""
    if not sys.executable:
        raise OSError("no python interpreter to start (sys.executable is empty)")
    path = os.pathsep.join(entry for entry in sys.path if entry)
    return subprocess.Popen(
        [sys.executable, "-P", "-c", code, *args],
        env={**os.environ, "PYTHONPATH": path},
        **popen,
    )


__all__ = ["start_python"]
