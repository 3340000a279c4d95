"""A local worker's private places (`PrivatePlaces`), made once when it starts in its own mount
namespace (`rlenv.executors.local`): /var/tmp a tmpfs of its own, /tmp and $HOME overlays on
the host's (reads see the host's files, writes stay in a tmpfs the children cannot reach), its
work root, grader cache and the places `keep` names bound back as they are, every other mount
read-only in its namespace (the env's directory, site-packages, /etc for a root world). The work
root can be a view in which a call sees its own workdir alone (`PrivatePlaces.show`). After a
call's reply is sent, the worker puts a fresh layer on each private place the call wrote
(`PrivatePlaces.renew`), so no later call reads what it left there (`rlenv.worker.isolate`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rlenv.worker.privileges import _NOBODY, _libc

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 8, 32, 4096
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_MS_REC, _MS_PRIVATE, _MS_MOVE = 16384, 1 << 18, 8192
_ST_KEPT = {  # statvfs flag -> the mount flag that keeps it on a read-only remount
    os.ST_NOSUID: _MS_NOSUID,
    os.ST_NODEV: _MS_NODEV,
    os.ST_NOEXEC: _MS_NOEXEC,
    os.ST_NOATIME: _MS_NOATIME,
    os.ST_NODIRATIME: _MS_NODIRATIME,
    os.ST_RELATIME: _MS_RELATIME,
}
_LEFT_WRITABLE_TYPES = {"proc", "devpts", "mqueue", "binfmt_misc", "fusectl", "tracefs"}
"""Mount types left as they are: their files are the kernel's interfaces (a write to one is
not a file another rollout reads) or not reachable without a capability."""
_MNT_DETACH = 2
_TMPFS_OPTIONS = "mode=1777,size=256m"
_VIEW_OPTIONS = "mode=755,size=1m"


def _text(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _mount(
    libc: Any,
    source: str | None,
    target: str,
    kind: str | None,
    flags: int,
    data: str | None = None,
) -> bool:
    return int(libc.mount(_text(source), target.encode(), _text(kind), flags, _text(data))) == 0


@dataclasses.dataclass
class PrivatePlaces:
    """A worker's own /var/tmp (a tmpfs) and /tmp, $HOME (overlays on the host's), made once
    in its own mount namespace (`make`), given a fresh layer after a call that wrote in them
    (`renew`). The overlays' upper layers live in a tmpfs under /var/tmp's, reachable only
    through `stage`, a descriptor of this process's (closed in every child): the worker sees
    what a call wrote there, the child cannot reach it."""

    stage: int
    kept: list[tuple[str, int]]  # (path, O_PATH descriptor) bound back over the places
    overlays: dict[str, int]  # place -> its generation (the name of its current layer)
    scratch: str | None  # /var/tmp when it is a tmpfs of ours
    read_only: list[str] = dataclasses.field(default_factory=list)  # made read-only here
    view: str | None = None  # the work root, where env code sees one workdir (`show`)
    real: int | None = None  # O_PATH descriptor of the host's work root (the worker's own)
    shown: str | None = None  # the workdir (a name in the work root) the view holds
    view_on: bool = False  # the view's tmpfs is mounted over the work root
    view_locked: bool = False  # its root is nobody's: no call can change it (`_cover`)

    @classmethod
    def make(cls, keep: list[str], view: str | None = None) -> PrivatePlaces | None:
        """The private places, or None when this process may not mount (nothing changed).
        `view` (a kept place: the work root) is covered by an empty tmpfs in which `show`
        puts one workdir at a time: a call sees its own workdir there and nothing beside it,
        not another rollout's, not a file a rollout left in the work root."""
        libc = _libc()
        if not _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE):
            return None
        scratch = "/var/tmp"
        if not os.path.isdir(scratch):
            return None
        if not _mount(libc, "rlenv-stage", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=700"):
            return None
        # covered by the scratch tmpfs below: reachable through `stage` only (overlayfs takes
        # no layer from a detached mount)
        stage = os.open(scratch, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        kept: list[tuple[str, int]] = []
        for path in keep:
            with contextlib.suppress(OSError):
                kept.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)))
        places = cls(stage, kept, {}, None)
        if places._fresh_scratch(scratch):
            places.scratch = scratch
        home = os.path.realpath(os.path.expanduser("~"))
        candidates = ["/tmp"]
        shared = any(Path(home).is_relative_to(p) for p in ("/tmp", scratch))
        if os.path.isdir(home) and not shared and home != "/":
            candidates.append(home)
        for place in candidates:
            if os.path.isdir(place) and places._layer(place, 0):
                places.overlays[place] = 0
        places._bind_kept()
        places.read_only = places._read_only_rest()
        if view is not None and view in keep and places._can_cover(view, keep):
            places.view = view
        return places

    def real_root(self) -> str | None:
        """The path through which this worker reaches the host's work root (None: no view)."""
        return None if self.view is None or self.real is None else f"/proc/self/fd/{self.real}"

    def _can_cover(self, view: str, keep: list[str]) -> bool:
        """The view over the work root, unless a kept place is inside it (it would be hidden)."""
        inside = any(path != view and _within(path, view) for path in keep)
        return not inside and self._cover(view)

    def _cover(self, view: str) -> bool:
        """The work root's descriptor (of the writable mount now there), then an empty
        tmpfs over it."""
        if self.real is not None:
            os.close(self.real)
        self.real = os.open(view, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.shown = None
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOATIME
        self.view_on = _mount(_libc(), "rlenv-work-view", view, "tmpfs", flags, _VIEW_OPTIONS)
        self.view_locked = False
        if self.view_on:
            # owned by nobody: a call's child (uid 0 without capabilities) can neither write
            # beside its workdir nor chmod, touch or set an attribute on the view's root, so
            # the view need not be made anew after each call (`renew`); the worker, which
            # keeps its capabilities, still makes and removes the workdirs' mount points
            with contextlib.suppress(OSError):
                os.chown(view, _NOBODY, _NOBODY)
                self.view_locked = True
        return self.view_on

    def show(self, name: str) -> None:
        """Workdir `name` of the host's work root at its place in the view, alone."""
        if self.view is None or self.real is None or self.shown == name or "/" in name:
            return
        libc = _libc()
        if not self.view_on and not self._cover(self.view):
            raise OSError("the work root's view could not be mounted")
        target = os.path.join(self.view, name)
        if self.shown is not None and self._move(name, target):
            return
        if self.shown is not None:
            # at once (the call's processes are gone): a lazy detach waits as long, and longer
            shown = os.path.join(self.view, self.shown).encode()
            if libc.umount2(shown, 0) != 0:
                libc.umount2(shown, _MNT_DETACH)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.view, self.shown))
            self.shown = None
        os.makedirs(target, exist_ok=True)
        if not _mount(libc, f"/proc/self/fd/{self.real}/{name}", target, None, _MS_BIND):
            raise OSError(ctypes.get_errno(), f"workdir {name} could not be shown")
        self.shown = name

    def _move(self, name: str, target: str) -> bool:
        """The shown workdir's mount moved to `name`'s place when it already holds that very
        directory (a workdir put aside empty and taken again under the next rollout's name:
        `WorldRuntime.release`): no unmount, whose wait for the kernel (an RCU grace period)
        was a millisecond of every rollout."""
        assert self.shown is not None and self.real is not None
        shown = os.path.join(self.view or "", self.shown)
        try:
            now, wanted = os.stat(shown), os.stat(f"/proc/self/fd/{self.real}/{name}")
        except OSError:
            return False
        if (now.st_dev, now.st_ino) != (wanted.st_dev, wanted.st_ino):
            return False
        os.makedirs(target, exist_ok=True)
        if not _mount(_libc(), shown, target, None, _MS_MOVE):
            with contextlib.suppress(OSError):
                os.rmdir(target)
            return False
        with contextlib.suppress(OSError):
            os.rmdir(shown)
        self.shown = name
        return True

    def _reset_view(self) -> None:
        """An empty view again: what a call left beside its workdir is gone."""
        if self.view is None:
            return
        if self.view_on:
            _libc().umount2(self.view.encode(), _MNT_DETACH)
        self._cover(self.view)

    def handles(self) -> list[int]:
        """What a child closes first."""
        real = [] if self.real is None else [self.real]
        return [self.stage, *(fd for _, fd in self.kept), *real]

    def made(self) -> list[str]:
        return ([self.scratch] if self.scratch else []) + list(self.overlays)

    def _fresh_scratch(self, scratch: str) -> bool:
        libc = _libc()
        flags = _MS_NOSUID | _MS_NODEV
        return _mount(libc, "rlenv-tmp", scratch, "tmpfs", flags, _TMPFS_OPTIONS)

    def _dirs(self, place: str, generation: int) -> tuple[str, str]:
        name = place.strip("/").replace("/", "-") or "root"
        base = f"/proc/self/fd/{self.stage}/{name}-{generation}"
        return base + "-upper", base + "-work"

    def _layer(self, place: str, generation: int) -> bool:
        upper, work = self._dirs(place, generation)
        os.mkdir(upper, 0o1777 if place == "/tmp" else 0o755)
        os.mkdir(work)
        data = f"lowerdir={place},upperdir={upper},workdir={work}"
        return _mount(_libc(), "rlenv-overlay", place, "overlay", 0, data)

    def _bind_kept(self) -> None:
        libc = _libc()
        for path, fd in self.kept:
            if any(Path(path).is_relative_to(place) for place in self.made()):
                _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND)
                if self.read_only:  # a bind takes its source's flags: the source is read-only
                    _remount(libc, path, read_only=False)

    def _read_only_rest(self) -> list[str]:
        """Every other mount read-only in this namespace (the host's stay as they are): a
        file a call writes anywhere but its own places (the env's directory, site-packages,
        /etc when the world runs as root) is not there for the next call to read. A kept place
        that is no mount of its own is bound over itself first, so it stays writable. What
        was made read-only, by mount point."""
        libc = _libc()
        writable = [path for path, _ in self.kept] + self.made() + ["/dev/shm"]
        for path, fd in self.kept:
            if not any(Path(path).is_relative_to(place) for place in self.made()):
                _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND)
        done = []
        for point, kind in _mounts():
            if kind in _LEFT_WRITABLE_TYPES or any(_within(point, w) for w in writable):
                continue
            if _remount(libc, point, read_only=True):
                done.append(point)
        return done

    def renew(self) -> None:
        """A fresh layer on each place a call wrote in (nothing to do for an untouched one:
        its upper layer is empty); the old layer's files removed."""
        libc, renewed = _libc(), False
        if self.scratch is not None:
            try:
                written = bool(os.listdir(self.scratch))
            except OSError:
                written = True
            if written:
                libc.umount2(self.scratch.encode(), _MNT_DETACH)
                if not self._fresh_scratch(self.scratch):
                    self.scratch = None
                renewed = True
        for place, generation in list(self.overlays.items()):
            upper, work = self._dirs(place, generation)
            try:
                written = bool(os.listdir(upper))
            except OSError:
                written = True
            if not written:
                continue
            libc.umount2(place.encode(), _MNT_DETACH)
            if self._layer(place, generation + 1):
                self.overlays[place] = generation + 1
            else:
                del self.overlays[place]
            shutil.rmtree(upper, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
            renewed = True
            if self.view is not None and _within(self.view, place):
                self.view_on = False  # detached with the layer it was on
        if renewed:
            self._bind_kept()
        if renewed or not self.view_on or not self.view_locked:
            self._reset_view()


def _remount(libc: Any, point: str, *, read_only: bool) -> bool:
    """Mount point `point` read-only or writable, its other flags as they are (a flag the
    namespace's owner locked, such as nosuid, must be given again)."""
    try:
        flags = os.statvfs(point).f_flag
    except OSError:
        return False
    kept = sum(mount for st, mount in _ST_KEPT.items() if flags & st)
    remount = _MS_REMOUNT | _MS_BIND | kept | (_MS_RDONLY if read_only else 0)
    return _mount(libc, None, point, None, remount)


def _within(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip("/") + "/")


def _mounts() -> list[tuple[str, str]]:
    """This namespace's mounts as (mount point, type), parents before children."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(" ")
        try:
            after = fields.index("-")
        except ValueError:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \\040
        found.append((point, fields[after + 1]))
    return found
