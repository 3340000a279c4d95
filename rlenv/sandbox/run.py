"""``run_sandboxed``: one program, isolated, limited, supervised to the end."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.sandbox import process
from rlenv.sandbox.faketime import (
    SITE_DIR_INSIDE,
    faketime_env,
    faketime_library,
    faketime_site_dir,
)
from rlenv.sandbox.limits import (
    MECHANISMS,
    OUTPUT_LIMIT,
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    SandboxLimits,
    SandboxResult,
    is_root,
    python_prefix,
    sandbox_python,
)
from rlenv.sandbox.mechanism import (
    FORCE_VARIABLE,
    Launch,
    cover_list,
    forced_mechanism,
    hide_list,
    launch,
    mechanism_notes,
    own_budget_works,
    within,
)
from rlenv.world import seccomp

_MIB = 1024 * 1024
_HOST_PATH = "/usr/local/bin:/usr/bin:/bin"


def run_sandboxed(
    argv: list[str],
    workdir: Path,
    *,
    limits: SandboxLimits,
    hidden: list[Path] | None = None,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    mechanism: str | None = None,
    output_limit: int = OUTPUT_LIMIT,
    interact: Callable[[int, int, float], None] | None = None,
) -> SandboxResult:
    """Run ``argv`` isolated: no network, read-only system, writable only in a copy of
    ``workdir`` (its cwd, HOME and TMPDIR), ``hidden`` paths invisible, limits enforced (memory
    and disk for the sandbox as a whole, see ``SandboxLimits``), env cleared.

    With bwrap and unshare the program works on a size-capped tmpfs filled with a copy of
    ``workdir`` (hidden paths inside it left out); what it writes there never reaches the
    host. ``mechanism`` forces one of ``MECHANISMS`` (default: ``probe_mechanism()``). Inside a
    bwrap sandbox the workdir is ``SANDBOX_WORKDIR``; with the fallbacks it is its host path
    (with ``rlimits``, the host directory itself, written in place).
    """
    if mechanism is None:
        mechanism = probe_mechanism()
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown sandbox mechanism {mechanism!r}; expected one of {MECHANISMS}")
    workdir, hidden_paths = _checked_paths(workdir, hidden)
    notes: list[str] = []
    site_dir = faketime_site_dir() if limits.frozen_time and faketime_library() else None
    spec = _wrapper_spec(argv, workdir, hidden_paths, mechanism, limits, env, site_dir, notes)
    notes += mechanism_notes(mechanism, is_root())
    seed_fd = None
    if mechanism != "rlimits":
        seed_fd = _seed_archive(workdir, hidden_paths)
        spec["seed_fd"] = seed_fd
        if mechanism == "unshare":
            spec["tmpfs"] = limits.disk_mb * _MIB
    try:
        command = launch(
            mechanism,
            spec,
            workdir,
            hidden_paths,
            site_dir,
            seed_fd=seed_fd,
            disk_bytes=limits.disk_mb * _MIB,
        )
    except BaseException:
        if seed_fd is not None:
            os.close(seed_fd)
        raise
    if seed_fd is not None:
        command.owned.append(seed_fd)
    original_owner = None
    try:
        if is_root() and mechanism == "rlimits":  # the program works in the host dir itself
            st = workdir.stat()
            original_owner = (st.st_uid, st.st_gid)
            process.chown_tree(workdir, SANDBOX_UID, SANDBOX_UID)
        outcome = _supervise(command, stdin, limits.wall_seconds, output_limit, notes, interact)
    finally:
        command.close()
        if original_owner is not None:
            process.chown_tree(workdir, *original_owner)
    killed_by = (
        "wall"
        if outcome.timed_out
        else process.classify(
            mechanism, outcome.returncode, outcome.stderr, outcome.cpu_used, limits
        )
    )
    return SandboxResult(
        returncode=outcome.returncode,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        timed_out=outcome.timed_out,
        killed_by=killed_by,
        mechanism=mechanism,
        wall_seconds=outcome.wall_seconds,
        truncated=outcome.truncated,
        notes=notes,
    )


def _seed_archive(workdir: Path, hidden: list[Path]) -> int:
    """A memfd holding a tar of ``workdir`` without the hidden paths, every mtime 0: what the
    sandbox's tmpfs workdir starts with (no host path of it is mounted into the sandbox)."""
    import tarfile

    fd = os.memfd_create("rlenv-sandbox-seed", 0)

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        path = workdir / member.name
        if any(within(path, h) for h in hidden):
            return None
        member.mtime = 0  # as a snapshot copy's: no file tells the host's date (or two apart)
        return member

    with os.fdopen(os.dup(fd), "wb") as handle, tarfile.open(fileobj=handle, mode="w|") as tar:
        for entry in sorted(workdir.iterdir()):
            tar.add(str(entry), arcname=entry.name, filter=keep)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _checked_paths(workdir: Path, hidden: list[Path] | None) -> tuple[Path, list[Path]]:
    """The resolved workdir and the hidden paths that exist; ValueError when they clash."""
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise ValueError(f"sandbox workdir {workdir} is not a directory")
    hidden_paths = [Path(p).resolve() for p in (hidden or []) if os.path.lexists(p)]
    for path in hidden_paths:
        if within(workdir, path):
            raise ValueError(f"hidden path {path} contains the workdir {workdir}")
    return workdir, hidden_paths


# --------------------------------------------------------------------------- the wrapper's spec


def _rlimits(limits: SandboxLimits, *, nproc: bool) -> list[tuple[str, tuple[int, int]]]:
    """The wrapper's rlimits. With a process limit, each of the ``max_processes`` tasks gets
    its share of ``memory_mb``, so the sandbox as a whole stays within it; without one
    (``rlimits`` as a normal user) ``memory_mb`` is per process (noted in the result)."""
    cpu = max(1, int(limits.cpu_seconds))
    memory = limits.memory_mb * _MIB
    if nproc:
        memory //= max(1, limits.max_processes)
    out = [
        ("RLIMIT_CPU", (cpu, cpu + 1)),
        ("RLIMIT_AS", (memory, memory)),
        ("RLIMIT_FSIZE", (limits.file_size_mb * _MIB, limits.file_size_mb * _MIB)),
        ("RLIMIT_CORE", (0, 0)),
        ("RLIMIT_NOFILE", (256, 256)),
    ]
    if nproc:
        out.append(("RLIMIT_NPROC", (limits.max_processes, limits.max_processes)))
    return out


def _sandbox_env(
    limits: SandboxLimits,
    home: str,
    extra: dict[str, str] | None,
    notes: list[str],
    site_dir: str,
) -> dict[str, str]:
    env = {
        "PATH": _HOST_PATH,
        "HOME": home,
        "TMPDIR": home,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "TZ": limits.tz,
        "LC_ALL": limits.locale,
        "LANG": limits.locale,
        "PYTHONHASHSEED": str(limits.hash_seed),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }
    if limits.frozen_time is not None:
        frozen = faketime_env(limits.frozen_time, limits.tz, site_dir)
        if not frozen:
            notes.append("frozen_time not applied: libfaketime is not installed")
        env.update(frozen)
    env.update(extra or {})
    return env


def _wrapper_spec(
    argv: list[str],
    workdir: Path,
    hidden: list[Path],
    mechanism: str,
    limits: SandboxLimits,
    env: dict[str, str] | None,
    site_dir: str | None,
    notes: list[str],
) -> dict[str, Any]:
    """What ``wrapper.py`` does before it execs the program (see its docstring)."""
    root = is_root()
    inside_workdir = SANDBOX_WORKDIR if mechanism == "bwrap" else str(workdir)
    site_inside = SITE_DIR_INSIDE if mechanism == "bwrap" else (site_dir or "")
    keep = [(python_prefix(), False), (str(workdir), True)]
    if site_dir is not None:
        keep.append((site_dir, False))
    return {
        "argv": list(argv),
        "env": _sandbox_env(limits, inside_workdir, env, notes, site_inside),
        "cwd": inside_workdir,
        "uid": SANDBOX_UID if root else None,
        # As root, a user namespace of its own, so its processes count against its own
        # max_processes and not against every sandbox's on the machine (`wrapper.own_budget`).
        "own_budget": root and own_budget_works(),
        # Non-root without a user namespace: RLIMIT_NPROC would count all the caller's
        # processes, so it is left out there.
        "rlimits": _rlimits(limits, nproc=root or mechanism != "rlimits"),
        "hostname": "sandbox" if mechanism == "unshare" else None,
        "hide": hide_list(hidden, top_level=True) if mechanism == "unshare" else [],
        "cover": cover_list(workdir, root) if mechanism == "unshare" else [],
        "keep": keep,
        "init": mechanism == "unshare",
        # the kernel's channels between runs (keyring, SysV and POSIX IPC): refused below
        # Python, for the program and all it starts (`rlenv.world.seccomp`)
        "seccomp": seccomp.channel_filter().hex() if seccomp.supported() else None,
    }


# --------------------------------------------------------------------------- supervision


@dataclass
class _Outcome:
    returncode: int
    timed_out: bool
    cpu_used: float
    wall_seconds: float
    stdout: bytes
    stderr: bytes
    truncated: bool


def _supervise(
    command: Launch,
    stdin: bytes | None,
    wall_seconds: float,
    output_limit: int,
    notes: list[str],
    interact: Callable[[int, int, float], None] | None = None,
) -> _Outcome:
    """Start the command, pump its pipes, wait for it (and its namespace) to end."""
    out, err = bytearray(), bytearray()
    overflow = [False]
    inits: list[int] = []
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command.command,
            stdin=subprocess.PIPE if stdin is not None or interact else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": _HOST_PATH},
            cwd="/",
            start_new_session=True,
            pass_fds=command.pass_fds,
        )
        drain_out = threading.Thread(
            target=process.drain, args=(proc.stdout, out, output_limit, overflow)
        )
        threads = [
            threading.Thread(target=process.drain, args=(proc.stderr, err, output_limit, overflow)),
        ]
        if interact is None:
            threads.append(drain_out)
            if stdin is not None:
                threads.append(threading.Thread(target=process.feed, args=(proc.stdin, stdin)))
        for thread in threads:
            thread.daemon = True
            thread.start()
        if command.info_read is not None:
            command.close_info_write()
            inits = process.bwrap_init_pidfd(command.info_read)
        if interact is not None:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                interact(proc.stdin.fileno(), proc.stdout.fileno(), started + wall_seconds)
            except BaseException:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                raise
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                drain_out.daemon = True
                drain_out.start()
                threads.append(drain_out)
        returncode, timed_out, cpu_used = _wait_for_end(proc, wall_seconds, inits)
        wall = time.monotonic() - started
        for thread in threads:
            thread.join(timeout=5.0)
            if thread.is_alive():
                notes.append("output pipe still held by an escaped process; output cut")
    finally:
        for fd in inits:
            os.close(fd)
    return _Outcome(returncode, timed_out, cpu_used, wall, bytes(out), bytes(err), overflow[0])


def _wait_for_end(
    proc: subprocess.Popen[bytes], wall_seconds: float, inits: list[int]
) -> tuple[int, bool, float]:
    """Wait up to the wall limit, kill what is left, and wait for the namespace's init (whose
    pidfd goes into ``inits``); (returncode, timed out, CPU seconds)."""
    returncode, cpu_used = process.wait(proc, wall_seconds)
    timed_out = returncode is None
    if timed_out and not inits:
        # unshare's child is the namespace's pid 1; when it dies, everything in it dies.
        inits.extend(process.child_pidfds(proc.pid))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # also the leftovers of a finished run
    if timed_out:
        returncode, cpu_used = process.wait(proc, 30.0)
        if returncode is None:
            returncode = proc.wait()
    for pidfd in inits:
        # Readable once the init has exited, which it does only after the kernel has
        # killed and released every process of its namespace.
        select.select([pidfd], [], [], 10.0)
    assert returncode is not None
    return returncode, timed_out, cpu_used


# --------------------------------------------------------------------------- discovery


@functools.cache
def _mechanism_works(mechanism: str) -> bool:
    """Run a trivial Python command through ``mechanism``; True when it exits 0 with output."""
    if mechanism == "bwrap" and shutil.which("bwrap") is None:
        return False
    if mechanism == "unshare" and shutil.which("unshare") is None:
        return False
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rlenv-sandbox-probe-") as tmp:
        try:
            result = run_sandboxed(
                [sandbox_python(), "-S", "-c", "print('ok')"],
                Path(tmp),
                limits=SandboxLimits(cpu_seconds=5, wall_seconds=15, memory_mb=256),
                mechanism=mechanism,
            )
        except OSError:
            return False
    return result.returncode == 0 and result.stdout.strip() == b"ok"


def probe_mechanism() -> str:
    """Best isolation that works here: "bwrap", else "unshare", else "rlimits" (probed once);
    RLENV_SANDBOX=NAME forces one (read at every call: a bad name is always refused)."""
    return forced_mechanism() or _best_mechanism()


def probe_mechanism_soon() -> None:
    """Start `probe_mechanism`'s probe in a thread; a call of `probe_mechanism` meanwhile waits
    for it instead of probing again. The probe is ~0.1 s of waiting for a sandboxed child and
    little CPU, so `rlenv run` loads and checks its spec meanwhile (issue 30: the time before
    the first rollout). Nothing when RLENV_SANDBOX is set or the probe was made already."""
    if os.environ.get(FORCE_VARIABLE) or _probed_mechanism.cache_info().currsize:
        return
    threading.Thread(target=_probe_quietly, name="rlenv-sandbox-probe").start()


def _probe_quietly() -> None:
    with contextlib.suppress(Exception):  # `probe_mechanism` probes again, and raises there
        _best_mechanism()


_PROBING = threading.Lock()
"""Held while the mechanism is probed: one probe at a time, whose answer the others take."""


def _best_mechanism() -> str:
    with _PROBING:
        return _probed_mechanism()


@functools.lru_cache(maxsize=1)
def _probed_mechanism() -> str:
    for mechanism in ("bwrap", "unshare"):
        if _mechanism_works(mechanism):
            return mechanism
    return "rlimits"
