"""Filesystem snapshots: a fresh copy per rollout, and what the policy changed in it."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
from pathlib import Path
from typing import Any

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


_FS_IOC_GETFLAGS = 0x80086601  # chattr's flags (immutable, append-only, sync, casefold...)
_FS_IOC_FSGETXATTR = 0x801C581F  # struct fsxattr: xflags and the project id


def directory_state(path: Path | str) -> tuple[Any, ...] | None:
    """What a rollout could read off an empty directory besides its entries and times: type,
    mode, owner, link count, size and blocks (a directory grown by many entries stays large
    after they go), extended attributes (ACLs and security labels among them), inode flags
    and project id. None when it is not an empty directory (or cannot be read).

    Two directories with equal states look the same from inside; `rlenv.worker.runtime` reuses an
    emptied workdir for the next rollout only when its state equals a fresh one's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if os.listdir(fd):
            return None
        names = sorted(os.listxattr(fd))
        attributes = tuple((name, os.getxattr(fd, name)) for name in names)
        inode_flags: list[bytes | None] = []
        for request, size in ((_FS_IOC_GETFLAGS, 8), (_FS_IOC_FSGETXATTR, 28)):
            try:
                inode_flags.append(fcntl.ioctl(fd, request, bytes(size)))
            except OSError:  # not on this filesystem: the same for every directory on it
                inode_flags.append(None)
        return (
            stat.S_IFMT(status.st_mode),
            stat.S_IMODE(status.st_mode),
            status.st_uid,
            status.st_gid,
            status.st_nlink,
            status.st_size,
            status.st_blocks,
            attributes,
            *inode_flags,
        )
    except OSError:
        return None
    finally:
        os.close(fd)


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
    if not before and _empty(workdir):  # no snapshot, nothing written: no walk
        return {"added": {}, "removed": [], "modified": {}}
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


def _empty(directory: Path) -> bool:
    """An existing directory with nothing in it (one that is gone is not: the walk decides)."""
    try:
        return not os.listdir(directory)
    except OSError:
        return False
