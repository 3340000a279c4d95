"""Start a child process's clock at a fixed instant with libfaketime (monotonic left real)."""

from __future__ import annotations

import functools
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

SITE_DIR_INSIDE = "/.rlenv-site"
"""Where a bwrap sandbox sees ``faketime_site_dir()``."""
SLEEP_SHIM = Path(__file__).with_name("faketime_sleep.py")
"""The ``sitecustomize.py`` that keeps ``time.sleep`` working under libfaketime."""

_FAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


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


def faketime_string(instant: str, tz: str, *, stopped: bool = False) -> str:
    """The instant as local wall time in ``tz`` (libfaketime reads FAKETIME as local time):
    the clock starts there and ticks (``@``), or with ``stopped`` stands still there."""
    moment = datetime.fromisoformat(instant)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        from zoneinfo import ZoneInfo

        local = moment.astimezone(ZoneInfo(tz))
    except Exception:  # unknown zone: libc falls back to UTC as well
        local = moment.astimezone(UTC)
    return ("" if stopped else "@") + local.strftime("%Y-%m-%d %H:%M:%S")


@functools.lru_cache(maxsize=1)
def faketime_site_dir() -> str:
    """A directory with a sitecustomize.py that keeps ``time.sleep`` working in Python programs
    run under libfaketime; put it on PYTHONPATH.

    A copy, not the package directory: it must hold nothing else (it goes on the program's
    path) and be readable by the sandbox uid wherever rlenv is installed. Named by the user and
    the shim's content and kept between runs, so a worker that is killed (and never runs its
    exit handlers) leaves nothing behind; a directory of that name that is not ours, not a
    plain directory, writable by others or holding anything else is never used."""
    import hashlib
    import tempfile

    shim = SLEEP_SHIM.read_bytes()
    name = f"rlenv-faketime-site-{os.geteuid()}-{hashlib.sha256(shim).hexdigest()[:16]}"
    path = Path(tempfile.gettempdir()) / name
    if _usable_site_dir(path, shim):
        return str(path)
    staged = Path(tempfile.mkdtemp(prefix=name + ".", dir=path.parent))
    (staged / "sitecustomize.py").write_bytes(shim)
    (staged / "sitecustomize.py").chmod(0o644)
    staged.chmod(0o755)
    try:
        staged.rename(path)  # atomic; fails when another process made it first
    except OSError:
        shutil.rmtree(staged, ignore_errors=True)
    if _usable_site_dir(path, shim):
        return str(path)
    return _private_site_dir(shim)  # the shared name is taken by something else


def _usable_site_dir(path: Path, shim: bytes) -> bool:
    import stat

    try:
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return False
        if info.st_mode & 0o022 or os.listdir(path) != ["sitecustomize.py"]:
            return False
        inner = (path / "sitecustomize.py").lstat()
        if not stat.S_ISREG(inner.st_mode) or inner.st_uid != os.geteuid() or inner.st_mode & 0o022:
            return False
        return (path / "sitecustomize.py").read_bytes() == shim
    except OSError:
        return False


def _private_site_dir(shim: bytes) -> str:
    """A fresh directory for this process only, removed at its exit."""
    import atexit
    import tempfile

    path = tempfile.mkdtemp(prefix="rlenv-faketime-site-")
    os.chmod(path, 0o755)
    (Path(path) / "sitecustomize.py").write_bytes(shim)
    (Path(path) / "sitecustomize.py").chmod(0o644)
    creator = os.getpid()

    def cleanup() -> None:
        if os.getpid() == creator:  # not from a forked child that exits normally
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(cleanup)
    return path


def faketime_env(
    instant: str, tz: str = "UTC", site_dir: str | None = None, *, stopped: bool = False
) -> dict[str, str]:
    """Variables that start a child process's clock at ``instant`` (libfaketime; ``stopped``:
    held there), with the monotonic clock left real so timeouts work; {} when libfaketime is
    not installed. ``site_dir`` (default ``faketime_site_dir()``) goes on PYTHONPATH for the
    sleep fix."""
    library = faketime_library()
    if library is None:
        return {}
    return {
        "LD_PRELOAD": library,
        "FAKETIME": faketime_string(instant, tz, stopped=stopped),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": site_dir if site_dir is not None else faketime_site_dir(),
    }
