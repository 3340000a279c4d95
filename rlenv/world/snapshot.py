"""Filesystem snapshots: a fresh copy per rollout, and what the policy changed in it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rlenv.canonical import directory_manifest, unsafe_entries
from rlenv.errors import UserError


def fresh_copy(snapshot: Path | None, destination: Path) -> Path:
    """Copy the snapshot (or create an empty dir) at destination, replacing any leftover."""
    if snapshot is not None:
        unsafe = unsafe_entries(snapshot)  # never follow a link outside, never read a device
        if unsafe:
            raise UserError(f"snapshot.path: {unsafe[0]}", where=str(snapshot))
    if destination.exists():
        shutil.rmtree(destination)
    if snapshot is None:
        destination.mkdir(parents=True)
    elif os.environ.get("RLENV_PERTURB_LISTING") == "reverse":
        _copy_reversed(snapshot, destination)  # `verify --perturb`: another listing order
    else:
        shutil.copytree(snapshot, destination, symlinks=True)
    # fixed mtimes so nothing inside can tell two copies apart
    for root, dirs, files in os.walk(destination):
        for name in sorted(dirs) + sorted(files):
            os.utime(os.path.join(root, name), (0, 0), follow_symlinks=False)
    return destination


def _copy_reversed(source: Path, destination: Path) -> None:
    destination.mkdir(parents=True)
    for entry in sorted(source.iterdir(), key=lambda path: path.name, reverse=True):
        target = destination / entry.name
        if entry.is_dir() and not entry.is_symlink():
            _copy_reversed(entry, target)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)


def changes(before: list[tuple[str, str]], workdir: Path) -> dict[str, object]:
    """Files added, removed and modified relative to the snapshot manifest, with final hashes."""
    after = dict(directory_manifest(workdir))
    original = dict(before)
    added = {name: after[name] for name in sorted(after.keys() - original.keys())}
    removed = sorted(original.keys() - after.keys())
    modified = {
        name: after[name]
        for name in sorted(after.keys() & original.keys())
        if after[name] != original[name]
    }
    return {"added": added, "removed": removed, "modified": modified}
