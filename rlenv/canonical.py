"""The one canonical-JSON and hashing helper: every digest and fingerprint goes through here."""

from __future__ import annotations

import hashlib
import math
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


def directory_manifest(root: Path) -> list[tuple[str, str]]:
    """Sorted (relative posix path, sha256) of every regular file below root.

    Sorted explicitly so directory listing order never leaks into a hash.
    """
    entries: list[tuple[str, str]] = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            entries.append((path.relative_to(root).as_posix(), sha256_file(path)))
    entries.sort()
    return entries


def manifest_hash(root: Path) -> str:
    """sha256 of a directory's manifest: one `sha256  path` line per file, sorted by path."""
    text = "".join(f"{digest}  {name}\n" for name, digest in directory_manifest(root))
    return sha256_bytes(text.encode())
