"""Small filesystem helpers used everywhere: atomic writes and a scoped ``sys.path``.

Ground floor: imports nothing from rlenv. For a scoped working directory use the standard
library's ``contextlib.chdir``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The temporary file lives in the same directory (``os.replace`` is atomic only within one
    filesystem), is flushed and fsynced before the rename, and is removed if anything fails.
    """
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with _ignore_missing():
            os.unlink(temporary)
        raise


@contextmanager
def _ignore_missing() -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        pass


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
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)
