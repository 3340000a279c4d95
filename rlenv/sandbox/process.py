"""Host-side plumbing of a sandboxed run: pipes, waiting, the namespace's init, ownership,
and reading which limit ended the run."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

from rlenv.sandbox.limits import SandboxLimits


def drain(stream: Any, sink: bytearray, limit: int, overflow: list[bool]) -> None:
    """Read ``stream`` to its end, keeping the first ``limit`` bytes; flag what was cut."""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        room = limit - len(sink)
        if room > 0:
            sink += chunk[:room]
        if len(chunk) > max(room, 0):
            overflow[0] = True
    stream.close()


def feed(stream: Any, data: bytes) -> None:
    with contextlib.suppress(OSError):
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int | None, float]:
    """Wait up to ``timeout``; return (returncode or None on timeout, CPU seconds of the tree)."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            return proc.wait(timeout=timeout), 0.0
        except subprocess.TimeoutExpired:
            return None, 0.0
    try:
        ready, _, _ = select.select([pidfd], [], [], max(timeout, 0.0))
    finally:
        os.close(pidfd)
    if not ready:
        return None, 0.0
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def bwrap_init_pidfd(info_fd: int) -> list[int]:
    """Read bwrap's --info-fd JSON (written right after it spawns the namespace init, then
    closed) and return [pidfd of that init], or [] if bwrap failed before that."""
    data = b""
    while chunk := os.read(info_fd, 4096):
        data += chunk
    try:
        child = int(json.loads(data)["child-pid"])
        return [os.pidfd_open(child)]
    except (ValueError, KeyError, TypeError, OSError, AttributeError):
        return []


def child_pidfds(pid: int) -> list[int]:
    """pidfds of ``pid``'s children (for bwrap/unshare: the sandbox's pid 1)."""
    fds = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                for child in handle.read().split():
                    with contextlib.suppress(OSError, AttributeError):
                        fds.append(os.pidfd_open(int(child)))
    return fds


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """chown a workdir tree without following symlinks; multiply-linked files are skipped so
    a hard link planted by an earlier run cannot hand a foreign file to the sandbox uid."""
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    continue
                os.lchown(path, uid, gid)


def classify(
    mechanism: str, returncode: int, stderr: bytes, cpu_used: float, limits: SandboxLimits
) -> str | None:
    """Which limit ended a run that was not timed out (see ``SandboxResult.killed_by``)."""
    sig = None
    if returncode < 0:
        sig = -returncode
    elif mechanism in ("bwrap", "unshare") and returncode > 128:
        sig = returncode - 128  # the namespace's init reports death by signal N as 128 + N
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= limits.cpu_seconds):
        return "cpu"
    if sig == signal.SIGXFSZ:
        return "file_size"
    if returncode != 0:
        tail = stderr[-4096:]
        if b"MemoryError" in tail or b"Cannot allocate memory" in tail or b"bad_alloc" in tail:
            return "memory"
        if b"File too large" in tail:
            return "file_size"
        if b"BlockingIOError" in tail or b"Resource temporarily unavailable" in tail:
            return "processes"
    if sig is not None:
        return f"signal {sig}"
    return None
