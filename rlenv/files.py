"""Small filesystem helpers used everywhere: atomic writes, a scoped ``sys.path``, the cache.

Ground floor: imports nothing from rlenv. For a scoped working directory use the standard
library's ``contextlib.chdir``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rlenv.errors import UserError


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The temporary file lives in the same directory (``os.replace`` is atomic only within one
    filesystem), is flushed and fsynced before the rename, and is removed if anything fails.
    """
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _mode_for(target: Path) -> int:
    """Keep an existing file's mode; a new file gets what ``open()`` would give it (not 0600)."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def sys_path(entries: Iterable[str | Path]) -> Iterator[list[str]]:
    """Put ``entries`` at the front of ``sys.path`` for the block; remove only what was added."""
    added = []
    for entry in entries:
        text = str(entry)
        if text not in sys.path and text not in added:
            added.append(text)
    sys.path[:0] = added
    try:
        yield added
    finally:
        path = sys.path
        for entry in added if isinstance(path, list) else ():  # None at interpreter exit
            if entry in path:
                path.remove(entry)


def default_cache_dir() -> Path:
    """Where rlenv caches grades and cassette indexes: $RLENV_CACHE_DIR or ~/.cache/rlenv/grades."""
    return Path(os.environ.get("RLENV_CACHE_DIR") or Path.home() / ".cache" / "rlenv" / "grades")


def usable_out(run_dir: Path) -> Path:
    """`run_dir`, or UserError when the system cannot even look it up (a name longer than
    the file system takes, a loop of links): one line before any work, not a traceback."""
    try:
        os.lstat(run_dir)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise UserError(f"--out {str(run_dir)[:120]}: {exc.strerror}") from None
    for part in run_dir.parts:
        if len(os.fsencode(part)) > 255:
            raise UserError(f"--out: a path component is {len(part)} characters (at most 255)")
    return run_dir
