"""A cassette's request index built by a short-lived interpreter of its own, when the cache
does not hold it yet (`rlenv.world.replay.load_index` with ``aside``).

The orchestrator's env check (`check_cassette_secrets`) is the first to load a cassette's
index. Built there, it imported vcrpy (~7 MB) and detect-secrets with requests (~7 MB) into the
process for the whole run, and the parse's garbage raised its peak: a first run of a
10 000-interaction cassette peaked at 119 MB of orchestrator RSS against ~90 MB once the index
was cached. Here a fresh interpreter (`rlenv.fresh_python`) parses the cassette, finds its
secrets, writes the cache file and sends the very bytes it wrote back on its stdout; the
orchestrator unpickles them as it would have read the file, so a read-only cache still gets its
index. An error the build raises (a cassette that cannot be read, two responses for one
scrubbed request) comes back pickled and is raised here as itself: the same message, the same
``where``. A child that dies (the OOM killer, a signal) is a one-line RunFailed; a child that
cannot be started leaves the build to the caller, in its own process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rlenv.errors import RunFailed, portable
from rlenv.fresh_python import start_python

if TYPE_CHECKING:
    from rlenv.world.scrub import Scrubber

_CHILD = "from rlenv.world.replay import serve_index; serve_index()"
_INDEX = b"I"  # the answer: the cache file's bytes
_ERROR = b"E"  # the answer: the error the build raised, pickled


def index_aside(
    path: Path, scrubber: Scrubber, cache: Path
) -> tuple[Mapping[str, bytes], list[str]] | None:
    """`path`'s index and findings built by a child interpreter (which also writes them to
    `cache`), or None when no child can be had (the caller builds them itself). The build's
    error is raised as itself; a child that ends without answering is a RunFailed."""
    request = pickle.dumps((path, scrubber, cache), pickle.HIGHEST_PROTOCOL)
    try:
        process = start_python(_CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError:  # no process to be had
        return None
    try:
        answer, _ = process.communicate(request)
    finally:  # (interrupted: the child goes with this process's work)
        if process.poll() is None:
            process.kill()
            process.wait()
    kind, body = answer[:1], memoryview(answer)[1:]
    value = None
    with contextlib.suppress(Exception):  # a torn answer (killed as it wrote): no answer
        value = pickle.loads(body)
    if kind == _INDEX and isinstance(value, tuple):
        return value
    if kind == _ERROR and isinstance(value, BaseException):
        raise value
    raise RunFailed(
        f"indexing the cassette {path}: its process (pid {process.pid}) ended before it"
        f" answered: {_how(process.returncode)}"
    )


def _how(status: int) -> str:
    """How a process ended, from its exit status (negative: the signal that killed it)."""
    if status >= 0:
        return f"exit status {status}"
    if -status == signal.SIGKILL:
        return "killed by SIGKILL (out of memory?)"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


def serve(build: Callable[[Path, Scrubber, Path], bytes]) -> None:  # pragma: no cover
    """The child's side (``python -P -c``; `rlenv.world.replay.serve_index`): read (cassette,
    scrubber, cache path) pickled on stdin; answer on stdout what `build` returns (the cache
    file's bytes, once written) or the error it raised; exit."""
    answer = os.dup(1)
    os.dup2(2, 1)  # what a library prints goes to stderr, never into the answer
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's to handle
    try:
        path, scrubber, cache = pickle.loads(sys.stdin.buffer.read())
        parts = (_INDEX, build(path, scrubber, cache))
    except BaseException as exc:  # noqa: BLE001 - every failure is the orchestrator's to raise
        parts = (_ERROR, pickle.dumps(portable(exc, RuntimeError), pickle.HIGHEST_PROTOCOL))
    with contextlib.suppress(OSError), open(answer, "wb", closefd=True) as out:
        for part in parts:
            out.write(part)
    os._exit(0)  # the parse's heap is not worth tearing down


__all__ = ["index_aside", "serve"]
