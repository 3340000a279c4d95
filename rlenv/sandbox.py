"""Sandbox for code-executing verifiers: run a model-written program with no network, a
read-only view of the system, one writable directory, resource limits and a frozen clock.

Three mechanisms, best first (``probe_mechanism`` picks by actually running a command):

``bwrap``
    bubblewrap. Fresh mount, pid, net, ipc, uts namespaces; the new root holds read-only
    binds of /usr (and the /bin, /lib... links), a few /etc files and the Python prefix; the
    workdir is bound read-write at ``SANDBOX_WORKDIR``; everything else, including /tmp, /root,
    /home and the repository, is absent. As root, bwrap runs privileged (no user namespace) and
    the in-sandbox wrapper drops to the unprivileged host uid ``SANDBOX_UID`` before exec, which
    is what makes RLIMIT_NPROC bite (the kernel ignores it for host uid 0, including root
    mapped into a user namespace). As a normal user, bwrap uses a user namespace and the limits
    are set inside it, so the process budget counts only the sandbox's own processes.
``unshare``
    util-linux ``unshare``: fresh net, pid, mount, ipc, uts namespaces; hidden paths and the
    world-writable dirs (/tmp, /var/tmp, /dev/shm) are covered by empty read-only mounts; as
    root the wrapper drops to ``SANDBOX_UID``. The rest of the host file system stays visible
    (read-only to the sandbox uid as root; as a normal user, the caller's own files stay
    writable).
``rlimits``
    resource limits, a cleared environment and a new session only (plus the uid drop as root).
    No network isolation, hidden paths are not hidden; recorded in ``SandboxResult.notes``.

All mechanisms set no_new_privs, clear the environment and start a new session.
The sandboxed process cannot signal the caller: it is in another pid namespace (bwrap,
unshare), and as root it runs under another uid (all mechanisms). In ``rlimits`` mode as a
normal user nothing stops ``kill(-1, 9)``; use it only as a last resort.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "OUTPUT_LIMIT",
    "SANDBOX_UID",
    "SANDBOX_WORKDIR",
    "SandboxLimits",
    "SandboxResult",
    "faketime_env",
    "faketime_library",
    "faketime_site_dir",
    "faketime_string",
    "probe_mechanism",
    "run_program_cases",
    "run_python_tests",
    "run_sandboxed",
    "sandbox_python",
]

SANDBOX_WORKDIR = "/sandbox"
"""Where the workdir appears inside a bwrap sandbox (fixed, so tracebacks do not vary)."""
SANDBOX_UID = 65534
"""Unprivileged uid (nobody) the program runs as; as root it is also the host uid."""
OUTPUT_LIMIT = 64 * 1024
"""Bytes of stdout and of stderr kept; the rest is read and discarded."""

MECHANISMS = ("bwrap", "unshare", "rlimits")
_MIB = 1024 * 1024
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/localtime",
)
_FAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


@dataclass
class SandboxLimits:
    """Resource limits and the frozen environment of one sandboxed run."""

    cpu_seconds: int = 10
    wall_seconds: float = 20
    memory_mb: int = 512
    file_size_mb: int = 16
    max_processes: int = 64
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


# --------------------------------------------------------------------------- discovery


def sandbox_python() -> str:
    """The real interpreter binary (not a venv shim), runnable inside the sandbox."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _python_prefix() -> str:
    return os.path.realpath(sys.base_prefix)


def faketime_library() -> str | None:
    """Path of libfaketime on disk (under /usr, so also visible in the sandbox), or None."""
    for candidate in _FAKETIME_CANDIDATES:
        if os.path.exists(candidate):
            return candidate
    for base in ("/usr/lib", "/usr/local/lib"):
        hits = sorted(Path(base).glob("*/faketime/libfaketime.so.1"))
        if hits:
            return str(hits[0])
    return None


def _is_root() -> bool:
    return os.geteuid() == 0


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


@functools.lru_cache(maxsize=1)
def probe_mechanism() -> str:
    """Best isolation that works here: "bwrap", else "unshare", else "rlimits" (cached)."""
    for mechanism in ("bwrap", "unshare"):
        if _mechanism_works(mechanism):
            return mechanism
    return "rlimits"


# --------------------------------------------------------------------------- the wrapper

# Runs inside the sandbox just before the program: (unshare only) sets the hostname, covers
# /tmp-like and closed dirs and the hidden paths; then sets the rlimits, no_new_privs (setuid
# binaries cannot elevate), drops to the sandbox uid, restores default signal dispositions
# (Python ignores SIGPIPE/SIGXFSZ and exec would inherit that) and execs with a clean env.
_WRAPPER = r"""
import json, os, resource, signal, sys
spec = json.loads(sys.argv[1])
if spec.get("hostname"):
    try:
        import socket
        socket.sethostname(spec["hostname"])
    except OSError:
        pass
if spec.get("hide") or spec.get("cover"):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
    def _mount(src, dst, fstype, flags, data):
        if libc.mount(src, dst.encode(), fstype, flags, data) != 0:
            e = ctypes.get_errno()
            sys.stderr.write("sandbox: cannot mount on %s: %s\n" % (dst, os.strerror(e)))
            os._exit(125)
    def _under(path, root):
        return path == root or path.startswith(root.rstrip("/") + "/")
    # Cover world-writable dirs and dirs the sandbox uid cannot enter with empty read-only
    # tmpfs, then bind back what the program needs inside them (the interpreter read-only,
    # the workdir read-write), opened before they went out of sight.
    cover = [d for d in spec.get("cover", []) if os.path.isdir(d)]
    keep = [(p, w, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p, w in spec.get("keep", [])]
    for directory in cover:
        _mount(b"tmpfs", directory, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m")
    for path, writable, fd in keep:
        if any(_under(path, d) for d in cover):
            os.makedirs(path, exist_ok=True)
            _mount(("/proc/self/fd/%d" % fd).encode(), path, None, MS_BIND | MS_REC, None)
            if not writable:
                _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        os.close(fd)
    for directory in cover:
        _mount(None, directory, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    for path, kind in spec.get("hide", []):
        if not os.path.lexists(path):
            continue  # already out of sight under a covered directory
        if kind == "dir":
            _mount(b"tmpfs", path, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, b"mode=0555")
        else:
            _mount(b"/dev/null", path, None, MS_BIND, None)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
for name, value in spec["rlimits"]:
    resource.setrlimit(getattr(resource, name), tuple(value))
# Enter the workdir while still privileged when possible: its host parents may be closed to
# the sandbox uid, and an open cwd needs no search permission on them.
entered = False
try:
    os.chdir(spec["cwd"])
    entered = True
except OSError:
    pass
import ctypes
if ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
    sys.stderr.write("sandbox: cannot set no_new_privs\n")
    os._exit(125)
uid = spec.get("uid")
if uid is not None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
if not entered:
    os.chdir(spec["cwd"])
if spec.get("init"):
    # We are pid 1 of a fresh pid namespace (unshare). The kernel shields pid 1 from default
    # signal actions (SIGXCPU, SIGTERM, SIGPIPE...), so run the program as our child, reap
    # orphans, and report a death by signal N as 128 + N, the way bwrap does.
    child = os.fork()
    if child:
        status = 0
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid == child:
                break
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)
for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):
    signal.signal(sig, signal.SIG_DFL)
argv = spec["argv"]
try:
    os.execvpe(argv[0], argv, spec["env"])
except OSError as exc:
    sys.stderr.write("sandbox: cannot execute %s: %s\n" % (argv[0], exc))
    os._exit(127)
"""


def _rlimits(limits: SandboxLimits, *, nproc: bool) -> list[tuple[str, tuple[int, int]]]:
    cpu = max(1, int(limits.cpu_seconds))
    out = [
        ("RLIMIT_CPU", (cpu, cpu + 1)),
        ("RLIMIT_AS", (limits.memory_mb * _MIB, limits.memory_mb * _MIB)),
        ("RLIMIT_FSIZE", (limits.file_size_mb * _MIB, limits.file_size_mb * _MIB)),
        ("RLIMIT_CORE", (0, 0)),
        ("RLIMIT_NOFILE", (256, 256)),
    ]
    if nproc:
        out.append(("RLIMIT_NPROC", (limits.max_processes, limits.max_processes)))
    return out


def faketime_string(instant: str, tz: str) -> str:
    """The instant as local wall time in ``tz`` (libfaketime reads FAKETIME as local time)."""
    moment = datetime.fromisoformat(instant)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        from zoneinfo import ZoneInfo

        local = moment.astimezone(ZoneInfo(tz))
    except Exception:  # unknown zone: libc falls back to UTC as well
        local = moment.astimezone(UTC)
    return "@" + local.strftime("%Y-%m-%d %H:%M:%S")


_SLEEP_SHIM = '''"""Loaded by rlenv's sandbox with libfaketime. Python >= 3.11 sleeps with
clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which libfaketime 0.9.10 turns into EINVAL
when the monotonic clock is left real (wolfcw/libfaketime#426); sleep on select() instead."""
import select as _select
import time as _time


def _sleep(seconds):
    seconds = float(seconds)
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = _time.monotonic() + seconds
    while True:
        remaining = deadline - _time.monotonic()
        if remaining <= 0:
            return
        _select.select([], [], [], remaining)


_time.sleep = _sleep
'''
SITE_DIR_INSIDE = "/.rlenv-site"


@functools.lru_cache(maxsize=1)
def faketime_site_dir() -> str:
    """A directory (created once per process) with a sitecustomize.py that keeps
    ``time.sleep`` working in Python programs run under libfaketime; put it on PYTHONPATH."""
    import atexit
    import tempfile

    path = tempfile.mkdtemp(prefix="rlenv-faketime-site-")
    os.chmod(path, 0o755)
    shim = Path(path) / "sitecustomize.py"
    shim.write_text(_SLEEP_SHIM, encoding="utf-8")
    shim.chmod(0o644)
    creator = os.getpid()

    def cleanup() -> None:
        if os.getpid() == creator:  # not from a forked child that exits normally
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(cleanup)
    return path


def faketime_env(instant: str, tz: str = "UTC", site_dir: str | None = None) -> dict[str, str]:
    """Variables that start a child process's clock at ``instant`` (libfaketime), with the
    monotonic clock left real so timeouts work; {} when libfaketime is not installed.
    ``site_dir`` (default ``faketime_site_dir()``) goes on PYTHONPATH for the sleep fix."""
    library = faketime_library()
    if library is None:
        return {}
    return {
        "LD_PRELOAD": library,
        "FAKETIME": faketime_string(instant, tz),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": site_dir if site_dir is not None else faketime_site_dir(),
    }


def _sandbox_env(
    limits: SandboxLimits,
    home: str,
    extra: dict[str, str] | None,
    notes: list[str],
    site_dir: str,
) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
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


# --------------------------------------------------------------------------- command lines


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _bwrap_args(workdir: Path, hidden: list[Path], site_dir: str | None) -> list[str]:
    root = _is_root()
    args = [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
    ]
    if root:
        # Privileged bwrap: no user namespace, so the wrapper can become a real unprivileged
        # host uid; it keeps only the caps it needs for that and loses them at setuid.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    ro_paths: list[Path] = [Path("/usr")]
    args += ["--ro-bind", "/usr", "/usr"]
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
            ro_paths.append(Path(link))
    for etc in _ETC_FILES:
        if os.path.lexists(etc):
            args += ["--ro-bind", etc, etc]
            ro_paths.append(Path(etc))
    prefix = Path(_python_prefix())
    if not any(_within(prefix, p) for p in ro_paths):
        # Privileged bwrap makes missing parents 0700, closed to the sandbox uid.
        for parent in reversed(prefix.parents):
            if parent != Path("/"):
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(prefix), str(prefix)]
        ro_paths.append(prefix)
    if site_dir is not None:
        args += ["--ro-bind", site_dir, SITE_DIR_INSIDE]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--bind", str(workdir), SANDBOX_WORKDIR]
    for path in hidden:
        if _within(path, workdir):
            inside = str(Path(SANDBOX_WORKDIR) / path.relative_to(workdir))
        elif any(_within(path, p) for p in ro_paths):
            inside = str(path)
        else:
            continue  # not mounted in the sandbox at all
        if path.is_dir():
            args += ["--perms", "0555", "--tmpfs", inside, "--remount-ro", inside]
        else:
            args += ["--ro-bind", "/dev/null", inside]
    args += ["--remount-ro", "/"]
    return args


def _closed_parents(path: str) -> str | None:
    """The outermost ancestor of ``path`` that others cannot search, or None."""
    for parent in reversed(Path(path).parents):
        with contextlib.suppress(OSError):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return str(parent)
    return None


_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def _cover_list(workdir: Path, root: bool) -> list[str]:
    """Dirs an unshare sandbox replaces by an empty read-only tmpfs: the usual world-writable
    ones and, as root, the closed parents of the interpreter and the workdir."""
    candidates = [d for d in _WORLD_WRITABLE if not _within(Path(d), workdir)]
    if root:
        for path in (_python_prefix(), str(workdir)):
            closed = _closed_parents(path)
            if closed is not None:
                candidates.append(closed)
    outermost = [
        c for c in candidates if not any(o != c and _within(Path(c), Path(o)) for o in candidates)
    ]
    return list(dict.fromkeys(outermost))


def _hide_list(hidden: list[Path]) -> list[tuple[str, str]]:
    return [(str(p), "dir" if p.is_dir() else "file") for p in hidden]


# --------------------------------------------------------------------------- ownership


def _chown_tree(root: Path, uid: int, gid: int) -> None:
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


# --------------------------------------------------------------------------- running


def _drain(stream: Any, sink: bytearray, limit: int, overflow: list[bool]) -> None:
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


def _feed(stream: Any, data: bytes) -> None:
    with contextlib.suppress(OSError):
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int | None, float]:
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


def _bwrap_init_pidfd(info_fd: int) -> list[int]:
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


def _child_pidfds(pid: int) -> list[int]:
    """pidfds of ``pid``'s children (for bwrap/unshare: the sandbox's pid 1)."""
    fds = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                for child in handle.read().split():
                    with contextlib.suppress(OSError, AttributeError):
                        fds.append(os.pidfd_open(int(child)))
    return fds


def _classify(
    mechanism: str, returncode: int, stderr: bytes, cpu_used: float, limits: SandboxLimits
) -> str | None:
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
) -> SandboxResult:
    """Run ``argv`` isolated: no network, read-only system, writable only in ``workdir``
    (its cwd, HOME and TMPDIR), ``hidden`` paths invisible, limits enforced, env cleared.

    ``mechanism`` forces one of ``MECHANISMS`` (default: ``probe_mechanism()``). Inside a
    bwrap sandbox the workdir is ``SANDBOX_WORKDIR``; with the fallbacks it is its host path.
    """
    if mechanism is None:
        mechanism = probe_mechanism()
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown sandbox mechanism {mechanism!r}; expected one of {MECHANISMS}")
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise ValueError(f"sandbox workdir {workdir} is not a directory")
    hidden_paths = [Path(p).resolve() for p in (hidden or []) if os.path.lexists(p)]
    for path in hidden_paths:
        if _within(workdir, path):
            raise ValueError(f"hidden path {path} contains the workdir {workdir}")
    notes: list[str] = []
    root = _is_root()
    drop_uid = root
    inside_workdir = SANDBOX_WORKDIR if mechanism == "bwrap" else str(workdir)
    site_dir = faketime_site_dir() if limits.frozen_time and faketime_library() else None
    site_inside = SITE_DIR_INSIDE if mechanism == "bwrap" else (site_dir or "")
    keep = [(_python_prefix(), False), (str(workdir), True)]
    if site_dir is not None:
        keep.append((site_dir, False))
    wrapper_spec: dict[str, Any] = {
        "argv": list(argv),
        "env": _sandbox_env(limits, inside_workdir, env, notes, site_inside),
        "cwd": inside_workdir,
        "uid": SANDBOX_UID if drop_uid else None,
        # Non-root without a user namespace: RLIMIT_NPROC would count all the caller's
        # processes, so it is left out there.
        "rlimits": _rlimits(limits, nproc=root or mechanism != "rlimits"),
        "hostname": "sandbox" if mechanism == "unshare" else None,
        "hide": _hide_list(hidden_paths) if mechanism == "unshare" else [],
        "cover": _cover_list(workdir, root) if mechanism == "unshare" else [],
        "keep": keep,
        "init": mechanism == "unshare",
    }
    if mechanism == "rlimits":
        notes.append("no network isolation; hidden paths not hidden (rlimits mechanism)")
        if root and _closed_parents(_python_prefix()):
            notes.append(f"the interpreter under {_python_prefix()} is closed to the sandbox uid")
        if not root:
            notes.append("RLIMIT_NPROC not applied and kill(-1) not prevented (not root)")
    if mechanism == "unshare":
        notes.append("host file system visible (read-only for the sandbox uid only as root)")

    pass_fds: tuple[int, ...] = ()
    args_fd = info_read = info_write = None
    launcher = [sandbox_python(), "-I", "-S", "-c", _WRAPPER, json.dumps(wrapper_spec)]
    if mechanism == "bwrap":
        # Arguments go through a memfd (--args) so they do not show in /proc/1/cmdline.
        args_fd = os.memfd_create("bwrap-args", 0)
        # bwrap reports the host pid of the namespace's init on --info-fd: bwrap itself may
        # exit as soon as the program does, while the init is still tearing the namespace
        # down, so the init is what we wait for.
        info_read, info_write = os.pipe()
        bwrap_args = ["--info-fd", str(info_write), *_bwrap_args(workdir, hidden_paths, site_dir)]
        os.write(args_fd, b"\0".join(a.encode() for a in bwrap_args) + b"\0")
        os.lseek(args_fd, 0, os.SEEK_SET)
        # The command itself must follow on the real command line (bwrap reads only options
        # from --args); it holds the program's argv and env, nothing from the host.
        command = ["bwrap", "--args", str(args_fd), "--", *launcher]
        pass_fds = (args_fd, info_write)
    else:
        if mechanism == "unshare":
            command = ["unshare"]
            if not root:
                command.append("--map-root-user")
            command += ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
            command += ["--uts", "--ipc", "--", *launcher]
        else:
            command = launcher

    original_owner = None
    if drop_uid:
        st = workdir.stat()
        original_owner = (st.st_uid, st.st_gid)
        _chown_tree(workdir, SANDBOX_UID, SANDBOX_UID)

    out, err = bytearray(), bytearray()
    overflow = [False]
    inits: list[int] = []
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            cwd="/",
            start_new_session=True,
            pass_fds=pass_fds,
        )
        threads = [
            threading.Thread(target=_drain, args=(proc.stdout, out, output_limit, overflow)),
            threading.Thread(target=_drain, args=(proc.stderr, err, output_limit, overflow)),
        ]
        if stdin is not None:
            threads.append(threading.Thread(target=_feed, args=(proc.stdin, stdin)))
        for thread in threads:
            thread.daemon = True
            thread.start()
        if info_read is not None and info_write is not None:
            os.close(info_write)
            info_write = None
            inits = _bwrap_init_pidfd(info_read)
        returncode, cpu_used = _wait(proc, limits.wall_seconds)
        timed_out = returncode is None
        if timed_out and not inits:
            # unshare's child is the namespace's pid 1; when it dies, everything in it dies.
            inits = _child_pidfds(proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # also the leftovers of a finished run
        if timed_out:
            returncode, cpu_used = _wait(proc, 30.0)
            if returncode is None:
                returncode = proc.wait()
        for pidfd in inits:
            # Readable once the init has exited, which it does only after the kernel has
            # killed and released every process of its namespace.
            select.select([pidfd], [], [], 10.0)
        wall = time.monotonic() - started
        for thread in threads:
            thread.join(timeout=5.0)
            if thread.is_alive():
                notes.append("output pipe still held by an escaped process; output cut")
    finally:
        for fd in (args_fd, info_read, info_write, *inits):
            if fd is not None:
                os.close(fd)
        if original_owner is not None:
            _chown_tree(workdir, *original_owner)
    assert returncode is not None
    stderr = bytes(err)
    killed_by = "wall" if timed_out else _classify(mechanism, returncode, stderr, cpu_used, limits)
    return SandboxResult(
        returncode=returncode,
        stdout=bytes(out),
        stderr=stderr,
        timed_out=timed_out,
        killed_by=killed_by,
        mechanism=mechanism,
        wall_seconds=wall,
        truncated=overflow[0],
        notes=notes,
    )


# --------------------------------------------------------------------------- verifiers

# Imports solution.py through the tests, runs plain module-level asserts, test_* functions
# and unittest.TestCase classes, and prints one result line. The line carries a nonce that
# the runner reads from stdin only after every test ran, so output printed by the solution
# cannot pass for it; exiting early leaves no line at all and counts as a failure.
_RUNNER = r"""
import io, json, os, sys, traceback, types, unittest

class _Capped(io.TextIOBase):
    def __init__(self, limit=4096):
        self.parts, self.size, self.limit = [], 0, limit
    def writable(self):
        return True
    def write(self, s):
        if self.size < self.limit:
            self.parts.append(s[: self.limit - self.size])
        self.size += len(s)
        return len(s)
    def text(self):
        return "".join(self.parts)

def _short(exc):
    line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return line[:300]

def main():
    real_stdout = sys.stdout
    captured = _Capped()
    sys.stdout = sys.stderr = captured
    sys.path.insert(0, os.getcwd())
    passed, failed, failures = 0, 0, []
    try:
        module = types.ModuleType("test_solution")
        module.__file__ = os.path.join(os.getcwd(), "test_solution.py")
        sys.modules["test_solution"] = module
        with open("test_solution.py", encoding="utf-8") as handle:
            source = handle.read()
        load_error = None
        try:
            exec(compile(source, "test_solution.py", "exec"), module.__dict__)
        except BaseException as exc:
            load_error = exc
        functions = [
            (name, obj) for name, obj in list(vars(module).items())
            if name.startswith("test") and isinstance(obj, types.FunctionType)
            and obj.__module__ == "test_solution"
        ]
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        if load_error is not None:
            failed = max(1, len(functions) + suite.countTestCases())
            failures.append("loading tests: " + _short(load_error))
        elif not functions and suite.countTestCases() == 0:
            passed = 1  # plain asserts at module level, all held
        else:
            for name, function in functions:
                try:
                    function()
                    passed += 1
                except BaseException as exc:
                    failed += 1
                    failures.append(name + ": " + _short(exc))
            if suite.countTestCases():
                result = unittest.TestResult()
                suite.run(result)
                bad = result.failures + result.errors
                skipped = len(result.skipped) + len(result.unexpectedSuccesses)
                failed += len(bad) + skipped
                passed += result.testsRun - len(bad) - skipped
                for case, text in bad:
                    last = text.strip().splitlines()[-1][:300]
                    failures.append(case.id().split(".")[-1] + ": " + last)
    except BaseException as exc:
        failed = max(failed, 1)
        failures.append("runner: " + _short(exc))
    sys.stdout, sys.stderr = real_stdout, sys.__stderr__
    nonce = sys.stdin.read().strip()
    report = {"passed": passed, "failed": failed, "failures": failures[:20],
              "output": captured.text()}
    real_stdout.write("\n" + nonce + " " + json.dumps(report, sort_keys=True) + "\n")
    real_stdout.flush()

main()
"""

_PYTHON_FLAGS = ["-s", "-P", "-B"]
"""-I minus -E: -I would ignore PYTHONHASHSEED; the environment is already fully controlled."""


def _limit_reason(result: SandboxResult) -> str:
    if result.timed_out:
        return "killed by the wall-clock limit"
    if result.killed_by is not None:
        return (
            f"hit the {result.killed_by} limit"
            if " " not in result.killed_by
            else (f"killed by {result.killed_by}")
        )
    return f"exit code {result.returncode}"


def _tail(data: bytes, size: int = 400) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text[-size:]


def _prepare(workdir: Path, files: dict[str, str]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (workdir / name).write_text(text, encoding="utf-8")


def _verdict(passed: bool, score: float, detail: str, mechanism: str) -> dict[str, Any]:
    return {"passed": passed, "score": score, "detail": detail[:2000], "mechanism": mechanism}


def run_python_tests(
    code: str,
    tests: str,
    workdir: Path,
    limits: SandboxLimits,
    hidden: list[Path] | None = None,
    *,
    mechanism: str | None = None,
) -> dict[str, Any]:
    """Grade ``code`` (written to solution.py) with ``tests`` (plain asserts, test_* functions
    or unittest classes, importing from ``solution``) inside the sandbox; never raises for
    anything the code does. Returns {"passed", "score", "detail", "mechanism"}.

    The tests share an interpreter with the solution: containment protects the host, but a
    solution written to tamper with the runner in memory could forge its own verdict; use
    ``run_program_cases`` (compared outside the sandbox) where that matters.
    """
    mechanism = mechanism or probe_mechanism()
    workdir = Path(workdir)
    try:
        ast.parse(tests)
    except SyntaxError as exc:
        return _verdict(False, 0.0, f"tests do not parse: {exc}", mechanism)
    _prepare(
        workdir,
        {"solution.py": code, "test_solution.py": tests, "_rlenv_runner.py": _RUNNER},
    )
    nonce = secrets.token_hex(16)
    try:
        result = run_sandboxed(
            [sandbox_python(), *_PYTHON_FLAGS, "_rlenv_runner.py"],
            workdir,
            limits=limits,
            hidden=hidden,
            stdin=nonce.encode() + b"\n",
            mechanism=mechanism,
        )
    except OSError as exc:
        return _verdict(False, 0.0, f"sandbox could not start: {exc}", mechanism)
    reports = [
        line[len(nonce) + 1 :]
        for line in result.stdout.decode("utf-8", "replace").splitlines()
        if line.startswith(nonce + " ")
    ]
    if result.returncode != 0 or result.timed_out or len(reports) != 1:
        reason = _limit_reason(result)
        if len(reports) != 1 and result.returncode == 0 and not result.timed_out:
            reason = "the test runner did not report (the program exited early)"
        detail = f"failed: {reason}"
        stderr = _tail(result.stderr)
        if stderr:
            detail += f"; stderr: {stderr}"
        return _verdict(False, 0.0, detail, mechanism)
    report = json.loads(reports[0])
    total = report["passed"] + report["failed"]
    score = report["passed"] / total if total else 0.0
    passed = total > 0 and report["failed"] == 0
    detail = f"{report['passed']}/{total} tests passed"
    if report["failures"]:
        detail += "; " + "; ".join(report["failures"])
    if report["output"] and not passed:
        detail += "; output: " + report["output"][-400:]
    return _verdict(passed, score, detail, mechanism)


def _normalise(text: str) -> str:
    """Judge-style comparison: trailing spaces on each line and trailing blank lines ignored."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def run_program_cases(
    code: str,
    cases: list[dict[str, str]],
    workdir: Path,
    limits: SandboxLimits,
    hidden: list[Path] | None = None,
    *,
    mechanism: str | None = None,
) -> dict[str, Any]:
    """Run ``code`` (solution.py) once per case with the case's stdin and compare its stdout
    to ``expected_stdout`` outside the sandbox (trailing whitespace ignored). The score is the
    fraction of cases passed; never raises for anything the code does."""
    mechanism = mechanism or probe_mechanism()
    workdir = Path(workdir)
    if not cases:
        return _verdict(False, 0.0, "no test cases", mechanism)
    _prepare(workdir, {"solution.py": code})
    passed = 0
    problems: list[str] = []
    for index, case in enumerate(cases):
        expected = case.get("expected_stdout", "")
        try:
            result = run_sandboxed(
                [sandbox_python(), *_PYTHON_FLAGS, "solution.py"],
                workdir,
                limits=limits,
                hidden=hidden,
                stdin=case.get("stdin", "").encode("utf-8"),
                mechanism=mechanism,
                output_limit=max(OUTPUT_LIMIT, 2 * len(expected.encode("utf-8")) + 1024),
            )
        except OSError as exc:
            problems.append(f"case {index}: sandbox could not start: {exc}")
            continue
        got = result.stdout.decode("utf-8", "replace")
        if result.returncode != 0 or result.timed_out:
            problem = f"case {index}: {_limit_reason(result)}"
            stderr = _tail(result.stderr, 200)
            if stderr:
                problem += f" ({stderr})"
            problems.append(problem)
        elif _normalise(got) != _normalise(expected):
            problems.append(
                f"case {index}: wrong answer: expected {_clip(expected)!r}, got {_clip(got)!r}"
            )
        else:
            passed += 1
    detail = f"{passed}/{len(cases)} cases passed"
    if problems:
        detail += "; " + "; ".join(problems)
    return _verdict(passed == len(cases), passed / len(cases), detail, mechanism)


def _clip(text: str, size: int = 80) -> str:
    text = _normalise(text)
    return text if len(text) <= size else text[:size] + "..."
