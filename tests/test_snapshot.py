"""Snapshots are what their hash says: links hashed by target, nothing outside or special."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from rlenv.canonical import manifest_hash
from tests.conftest import EnvBuilder, cli


def _link_etc(snap: Path) -> str:
    (snap / "passwd").symlink_to("/etc/passwd")
    return "passwd"


def _link_relative_out(snap: Path) -> str:
    (snap / "sub").mkdir()
    (snap / "sub" / "up").symlink_to("../../outside.txt")
    return "sub/up"


def _link_dev_zero(snap: Path) -> str:
    (snap / "zero").symlink_to("/dev/zero")
    return "zero"


def _link_dir_out(snap: Path) -> str:
    (snap / "etc").symlink_to("/etc", target_is_directory=True)
    return "etc"


def _fifo(snap: Path) -> str:
    os.mkfifo(snap / "pipe")
    return "pipe"


def _socket(snap: Path) -> str:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(snap / "sock"))
    listener.close()
    return "sock"


def _device(snap: Path) -> str:
    if os.geteuid() != 0:  # only root may mknod; a link to a device is tested above
        (snap / "null").symlink_to("/dev/null")
    else:
        os.mknod(snap / "null", 0o600 | 0o020000, os.makedev(1, 3))  # character device
    return "null"


ATTACKS: dict[str, Callable[[Path], str]] = {
    "symlink_to_etc_passwd": _link_etc,
    "relative_symlink_outside": _link_relative_out,
    "symlink_to_dev_zero": _link_dev_zero,
    "symlink_to_outside_dir": _link_dir_out,
    "fifo": _fifo,
    "unix_socket": _socket,
    "device_file": _device,
}


def _snapshot_spec(builder: EnvBuilder, build: Callable[[Path], str]) -> tuple[Path, str]:
    builder.root.mkdir(parents=True, exist_ok=True)
    (builder.root / "outside.txt").write_text("host content")
    snap = builder.root / "snap"
    snap.mkdir()
    (snap / "ok.txt").write_text("fine")
    name = build(snap)
    spec = builder.write(
        "def policy(m, t, c):\n    return 'a'\n",
        snapshot={"path": "snap", "sha256": manifest_hash(snap)},
    )
    return spec, name


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_validate_refuses_unsafe_snapshot_entries(env_builder: EnvBuilder, attack: str) -> None:
    spec, name = _snapshot_spec(env_builder, ATTACKS[attack])
    result = cli("validate", str(spec), timeout=30)
    assert result.returncode == 2, (attack, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], result.stderr


def test_manifest_hashes_symlink_targets(tmp_path: Path) -> None:
    for target, where in (("a.txt", "one"), ("b.txt", "two")):
        root = tmp_path / where
        root.mkdir()
        (root / "a.txt").write_text("a")
        (root / "b.txt").write_text("b")
        (root / "link").symlink_to(target)
    assert manifest_hash(tmp_path / "one") != manifest_hash(tmp_path / "two")


def test_inside_links_are_kept_and_copied(env_builder: EnvBuilder, tmp_path: Path) -> None:
    from rlenv.world.snapshot import fresh_copy

    snap = tmp_path / "snap"
    (snap / "d").mkdir(parents=True)
    (snap / "d" / "f.txt").write_text("x")
    (snap / "link").symlink_to("d/f.txt")
    copy = fresh_copy(snap, tmp_path / "copy")
    assert os.readlink(copy / "link") == "d/f.txt"
    assert manifest_hash(copy) == manifest_hash(snap)


@pytest.mark.parametrize("attack", ["fifo", "symlink_to_dev_zero", "symlink_to_etc_passwd"])
def test_copy_never_reads_special_files_or_outside_links(tmp_path: Path, attack: str) -> None:
    from rlenv.errors import UserError
    from rlenv.world.snapshot import fresh_copy

    snap = tmp_path / "snap"
    snap.mkdir()
    ATTACKS[attack](snap)
    with pytest.raises(UserError):
        fresh_copy(snap, tmp_path / "copy")


def test_changes_without_a_snapshot(tmp_path: Path) -> None:
    """No snapshot: an empty workdir has no changes (without a walk), a written one has, and
    a workdir the rollout removed or replaced by a file has none (as the walk finds)."""
    from rlenv.world import snapshot

    nothing = {"added": {}, "removed": [], "modified": {}}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert snapshot.changes([], empty) == nothing
    written = tmp_path / "written"
    (written / "sub").mkdir(parents=True)
    (written / "sub" / "f").write_text("x")
    digest = hashlib.sha256(b"x").hexdigest()
    assert snapshot.changes([], written) == {
        "added": {"sub/f": digest},
        "removed": [],
        "modified": {},
    }
    assert snapshot.changes([], tmp_path / "gone") == nothing
    (tmp_path / "file").write_text("x")
    assert snapshot.changes([], tmp_path / "file") == nothing
