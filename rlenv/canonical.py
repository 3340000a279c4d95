"""The one canonical-JSON and hashing helper: every digest and fingerprint goes through here."""

from __future__ import annotations

import hashlib
import math
import os
import stat
from pathlib import Path
from typing import Any

import rfc8785


def _clean(value: Any) -> Any:
    """Make a value canonicalisable: tuples become lists, non-finite floats become None."""
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes (sorted keys, stable number formatting)."""
    return rfc8785.dumps(_clean(value))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(value: Any) -> str:
    return sha256_bytes(canonical_bytes(value))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(root: Path) -> list[tuple[str, str, str]]:
    """(relative posix path, kind, full path) of every entry below root, links not followed."""
    found: list[tuple[str, str, str]] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            full = os.path.join(current, name)
            mode = os.lstat(full).st_mode
            kind = (
                "link"
                if stat.S_ISLNK(mode)
                else "dir"
                if stat.S_ISDIR(mode)
                else "file"
                if stat.S_ISREG(mode)
                else "FIFO"
                if stat.S_ISFIFO(mode)
                else "socket"
                if stat.S_ISSOCK(mode)
                else "device file"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "special file"
            )
            found.append((Path(full).relative_to(root).as_posix(), kind, full))
    return found


def directory_manifest(root: Path) -> list[tuple[str, str]]:
    """Sorted (relative posix path, sha256) of every regular file and symlink below root.

    A symlink is hashed by its target (`symlink:` + target), never followed; FIFOs, sockets and
    devices carry no content and are left out (`unsafe_entries` names them). Sorted explicitly
    so directory listing order never leaks into a hash.
    """
    entries: list[tuple[str, str]] = []
    for name, kind, full in _entries(root):
        if kind == "file":
            entries.append((name, sha256_file(Path(full))))
        elif kind == "link":
            entries.append((name, sha256_bytes(b"symlink:" + os.fsencode(os.readlink(full)))))
    entries.sort()
    return entries


def unsafe_entries(root: Path) -> list[str]:
    """What makes a snapshot not what its hash says: symlinks leading outside it, FIFOs,
    sockets and device files (one line each, naming the entry)."""
    base = os.path.realpath(root)
    problems: list[str] = []
    for name, kind, full in sorted(_entries(root)):
        if kind == "link":
            target = os.path.realpath(full)
            if target != base and not target.startswith(base + os.sep):
                problems.append(
                    f"symlink {name} points outside the snapshot (-> {os.readlink(full)})"
                )
        elif kind not in ("file", "dir"):
            problems.append(f"{name} is a {kind}")
    return problems


def manifest_hash(root: Path) -> str:
    """sha256 of a directory's manifest: one `sha256  path` line per file, sorted by path."""
    text = "".join(f"{digest}  {name}\n" for name, digest in directory_manifest(root))
    return sha256_bytes(text.encode())
