"""What one sandboxed run is given and what it gives back, and the fixed names inside."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

SANDBOX_WORKDIR = "/sandbox"
"""Where the workdir appears inside a bwrap sandbox (fixed, so tracebacks do not vary)."""
SANDBOX_UID = 65534
"""Unprivileged uid (nobody) the program runs as; as root it is also the host uid."""
OUTPUT_LIMIT = 64 * 1024
"""Bytes of stdout and of stderr kept; the rest is read and discarded."""
MECHANISMS = ("bwrap", "unshare", "rlimits")


@dataclass
class SandboxLimits:
    """Resource limits and the frozen environment of one sandboxed run.

    ``memory_mb`` and ``disk_mb`` hold for the sandbox as a whole. Memory: at most
    ``max_processes`` tasks (processes and threads, RLIMIT_NPROC) each get ``memory_mb /
    max_processes`` of address space (RLIMIT_AS), so no number of children adds up to more.
    Disk: the workdir inside is a tmpfs of ``disk_mb`` (a copy of the host workdir; what the
    program writes there is discarded with it), and no other directory is writable. The
    tmpfs is memory too: the sandbox's whole footprint is at most ``memory_mb + disk_mb``.
    """

    cpu_seconds: int = 10
    wall_seconds: float = 20
    memory_mb: int = 512
    file_size_mb: int = 16
    max_processes: int = 8
    disk_mb: int = 64
    frozen_time: str | None = None
    """ISO 8601 instant the clock starts at (libfaketime), e.g. "2024-05-01T12:00:00+00:00"."""
    tz: str = "UTC"
    locale: str = "C.UTF-8"
    hash_seed: int = 0


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run. ``wall_seconds`` is volatile (keep it out of digests)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    killed_by: str | None
    """Which limit ended the run: "wall", "cpu", "memory", "file_size", "processes",
    "signal N", or None. "memory", "file_size" and "processes" are read from the error the
    program printed (a limit hit shows up as a failed call, not as a signal)."""
    mechanism: str
    wall_seconds: float
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


def sandbox_python() -> str:
    """The real interpreter binary (not a venv shim), runnable inside the sandbox."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def python_prefix() -> str:
    """The interpreter's installation prefix (its standard library lives under it)."""
    return os.path.realpath(sys.base_prefix)


def is_root() -> bool:
    return os.geteuid() == 0
