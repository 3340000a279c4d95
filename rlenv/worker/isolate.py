"""Env code in a process of its own per call (issue 26): a forged reply costs one rollout at most.

A local worker holds the orchestrator's pipe and runs no env code itself. Once, when it starts
in its own mount namespace (`rlenv.executors.local`), it makes private places
(`PrivatePlaces`): /var/tmp a tmpfs of its own, /tmp and $HOME overlays on the host's (reads see
the host's files, writes stay in a tmpfs the children cannot reach), its work root, grader
cache and the places `keep` names bound back as they are, every other mount read-only in its
namespace (the env's directory, site-packages, /etc for a root world); and it stops being
dumpable (no process without a capability may ptrace it or open its memory or file descriptors
through /proc). Once its world is loaded, before any call, it forks its *template*
(`start_template`), which:

- closes the orchestrator's pipe, the worker's handles on its private places and the output
  drains' read ends;
- drops every capability (effective, permitted, inheritable and the bounding set, so an
  ``exec`` cannot regain any) and sets ``PR_SET_NO_NEW_PRIVS``: nothing forked from it can
  ptrace the worker, write its memory, take the private mounts off, change them, or join
  another namespace (a user namespace of its own sees them locked);
- takes real and saved user ids that are not its children's, so none of them can signal it;
- then, for every call that runs env code, forks a child that runs the call and writes its
  answer to the worker as JSON (data only, bounded) through a pipe the worker passed with the
  request, then exits.

So every call's env code starts from the world as it was loaded, never from the worker as
earlier rollouts' grading left it, and the worker itself forks nothing per call (a fork
write-protected its pages: hundreds of copy-on-write faults in the worker per rollout).

The worker reads that answer as data about the call it made, for the rollout it made it for,
and sends the orchestrator its own reply: nothing the child writes reaches the orchestrator as
a message. The child's python state (module globals, ``os.environ``, patched builtins, open
files) dies with it, so no later rollout sees it. After the reply is sent (`settle`, off the
rollout's time) the template reaps the child and kills what it left running (a subreaper, it
gets the orphans), and the worker puts a fresh layer on each private place the call wrote.
A whole rollout is one child, the conversation (policy and tools), whose trajectory comes back
as data; the worker grades it itself (policy and tool code never ran in the worker, so a
policy cannot patch the verifiers that grade it).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import pickle
import re
import select
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlenv.agent import RolloutTimeout, ToolCrash, ToolOutcome, Trajectory
from rlenv.bounds import MAX_ERROR_CHARS, MAX_RECORD_BYTES
from rlenv.errors import FixtureMiss

MAX_ANSWER_BYTES = MAX_RECORD_BYTES + MAX_ERROR_CHARS + (1 << 20)
"""The most a child may write as its answer (a record is bounded by MAX_RECORD_BYTES)."""

RAISED: dict[str, type[Exception]] = {
    "FixtureMiss": FixtureMiss,
    "ToolCrash": ToolCrash,
    "RolloutTimeout": RolloutTimeout,
}
"""The exceptions a child's call may raise to the worker's caller, by name; any other is the
text of a RuntimeError (which the orchestrator refuses as that rollout's error)."""

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
_PROT_READ, _PROT_WRITE = 1, 2
_MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 2, 16, 32
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522
_TMPFS_OPTIONS = "mode=1777,size=256m"
_VIEW_OPTIONS = "mode=755,size=1m"


class ChildDied(Exception):
    """The child ended without an answer (killed, or env code ended its process): how."""


_LIBC: Any = None


def _libc() -> Any:
    """The C library, loaded once (a child inherits it: nothing to load after the fork)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.mmap.restype = ctypes.c_void_p
        _LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
        _LIBC.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
        _LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return _LIBC


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


# -- in the worker, once --------------------------------------------------------------------


def not_dumpable() -> bool:
    """This process may not be ptraced, nor its memory or descriptors opened through /proc, by
    any process without CAP_SYS_PTRACE (its call children hold none)."""
    return int(_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


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


SHARED_WITH_CHILDREN = ("faketime_shm_", "faketime_sem_")
"""Shared mappings a child inherits from its worker that no call may write through: libfaketime's
shared memory and semaphore (what one rollout wrote there, the next would read); and those of
`kept` (the worker's own semaphores, `keep_from_children`)."""

kept: tuple[str, ...] = ()
"""Files of /dev/shm the worker made as it started and keeps (a reward model's joblib/loky
semaphores: removed, they were a traceback when the worker exits)."""

_NOBODY = 65534

_TEMPLATE_UID = 2_000_000_000
"""The template's real and saved user id (`_template_life`): not its children's (uid 0), so
no process of theirs may signal it, and no other account's: nobody's (65534) is the sandbox's
(`rlenv.sandbox.limits.SANDBOX_UID`), whose RLIMIT_NPROC counts every process of that real uid
on the machine, so templates as nobody (one per worker, of every run) left a sandboxed program
no process to start. A uid from the range no distribution or container manager hands out."""


def keep_from_children(paths: list[str]) -> list[str]:
    """Keep the worker's files `paths` out of its children's reach: owned by nobody, mode 0600,
    so a child (uid 0 without capabilities: no DAC override, no chown, no fowner) can neither
    open them, nor chmod, rename or remove them in sticky /dev/shm; the worker (which keeps its
    capabilities) uses and unlinks them as before. Their shared mappings are swapped for private
    copies in each child (`kept`). What could not be handed over (the worker is not root, or
    nobody is not mapped in its user namespace): returned, left as they were."""
    global kept
    left = []
    for path in paths:
        try:
            os.chown(path, _NOBODY, _NOBODY, follow_symlinks=False)
            os.chmod(path, 0o600, follow_symlinks=False)
        except OSError:
            left.append(path)
    kept = tuple(paths)
    return left


def _copy_privately(regions: list[tuple[int, int, str]]) -> int:
    """Each of `regions` (shared mappings of this process) replaced by a private copy at the
    same address (what the code that uses it sees is unchanged; what this process writes there
    stays here): how many."""
    libc = _libc()
    copied = 0
    for start, end, perms in regions:
        size = end - start
        saved = ctypes.string_at(start, size)
        fixed = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_FIXED
        if libc.mmap(start, size, _PROT_READ | _PROT_WRITE, fixed, -1, 0) != start:
            raise OSError(ctypes.get_errno(), "a private copy of a shared mapping")
        ctypes.memmove(start, saved, size)
        protection = (_PROT_READ if "r" in perms else 0) | (_PROT_WRITE if "w" in perms else 0)
        libc.mprotect(start, size, protection)
        copied += 1
    return copied


_regions: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}


def shared_with_children() -> list[tuple[int, int, str]]:
    """The worker's shared mappings a child must copy (`SHARED_WITH_CHILDREN` and `kept`), read
    from /proc/self/maps once per set of names, before a fork: read in every child it cost a
    rollout more than the rollout's own work (the child's copy-on-write faults on a long file).
    They are mapped as the worker starts (libfaketime's at load, `kept` before any call), and a
    worker never unmaps them."""
    names = SHARED_WITH_CHILDREN + kept
    found = _regions.get(names)
    if found is None:
        found = _regions[names] = _shared_regions(names)
    return found


def _shared_regions(names: tuple[str, ...]) -> list[tuple[int, int, str]]:
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[1].endswith("s"):
                continue
            if any(name in fields[5] for name in names):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                found.append((start, end, fields[1]))
    return found


# -- in the child ----------------------------------------------------------------------------


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 63


_LAST_CAPABILITY: int | None = None


def drop_capabilities() -> bool:
    """No capability left, none to regain through exec (the bounding set emptied, no new
    privileges): the child cannot remount, ptrace its parent or take its file descriptors."""
    libc = _libc()
    last = _LAST_CAPABILITY if _LAST_CAPABILITY is not None else _last_capability()
    for capability in range(last + 1):
        dropped = libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) == 0
        if not dropped and ctypes.get_errno() == 22:  # EINVAL: past the last capability
            break
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    emptied = int(libc.capset(header, data)) == 0
    return emptied and int(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) == 0


def _encode(reply: tuple[str, Any]) -> bytes:
    kind, value = reply
    if kind == "raise":
        exception = value
        name = type(exception).__name__
        if type(exception) not in RAISED.values():
            text = str(exception)[:MAX_ERROR_CHARS]
            return json.dumps({"raise": name, "args": [text], "state": {}}).encode()
        state = {k: v for k, v in vars(exception).items() if not k.startswith("__")}
        body = {"raise": name, "args": list(exception.args), "state": state}
        return json.dumps(body, default=str).encode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {"fields": vars(value)}
    elif isinstance(value, tuple):
        value = {"tuple": list(value)}
    else:
        value = {"value": value}
    return json.dumps({"ok": value}).encode()


def _answer(body: Callable[[], Any], write_fd: int) -> None:
    """A call's child: run `body`, write its answer to `write_fd` (length-prefixed JSON) and
    exit; never returns."""
    code = 0
    try:
        try:
            reply: tuple[str, Any] = ("ok", body())
        except Exception as exc:
            reply = ("raise", exc)
        except BaseException as exc:  # SystemExit from env code that escaped its handler
            reply = ("raise", RuntimeError(f"{type(exc).__name__}: {exc}"))
        # what env code printed through Python's buffers reaches the worker's drains before
        # the answer does: `os._exit` below flushes nothing (a tool's `print` was lost)
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        try:
            data = _encode(reply)
        except Exception as exc:  # what does not encode as JSON: not the call's answer
            data = _encode(("raise", RuntimeError(f"an answer that is not data: {exc}")))
        view = memoryview(len(data).to_bytes(8, "big") + data)
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


# -- the template: forked once from the worker, it forks every call's child ----------------------

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
TEMPLATE_ANSWER_S = 10.0
"""How long the worker waits for its template's word (a child it forked, a call ended): one
that does not answer in time (stopped by a call's process, say) is killed and made again."""


@dataclasses.dataclass
class _Template:
    pid: int
    pidfd: int  # the template's own: readable once it has ended
    channel: socket.socket
    child: tuple[int, int] | None = None  # the call's child (pid, pidfd) until it is ended


class TemplateLost(Exception):
    """The template did not answer (ended, or stopped past `TEMPLATE_ANSWER_S`)."""


_Call = Callable[[str, tuple[Any, ...]], Any]
_template: _Template | None = None
_template_start: tuple[_Call, list[int], tuple[int, int], _Call] | None = None


def start_template(
    run: _Call, *, closing: list[int], output: tuple[int, int], in_template: _Call
) -> None:
    """In the worker, its world loaded and nothing yet graded: fork the template, the process
    every call's child is forked from (`in_child`). So each call's env code starts from the
    world as it was loaded, never from the worker as earlier rollouts' grading left it (a
    python verifier's module state, say); the child's prologue (descriptors closed, shared
    mappings copied, capabilities dropped) runs once, in the template; and the worker, which
    forks nothing per call, takes no copy-on-write fault after each one. `run(name, args)`
    is the call in the child; `closing`, what the template closes first (the orchestrator's
    pipe, the private places' handles, the output drains' read ends); `output`, the write
    ends of the drains a child's fd 1 and 2 are pointed at; `in_template(name, args)`, a call
    the template runs itself (`in_template`: rlenv's own code, what every later child should
    start with)."""
    global _template_start
    if _template_start is None:
        atexit.register(end_template)
    _template_start = (run, list(closing), output, in_template)
    _fork_template()


def end_template() -> None:
    """The template (and a call's child, if any) killed and reaped, as the worker's
    interpreter exits: before its teardown, which frees every object it holds and so writes to
    nearly every page of its heap. Pages the worker still shares with a live template are
    copied by those writes (issue 30: at 10k rollouts two workers' teardowns added ~35 MB to
    the run's peak in their last 50 ms); with the template gone, they are the worker's alone
    and written in place. A worker that is not exiting forks a new one at its next call."""
    _lose_template()


def template_started() -> bool:
    return _template_start is not None


def _fork_template() -> _Template:
    global _template, _LAST_CAPABILITY
    assert _template_start is not None, "start_template first"
    run, closing, output, inside = _template_start
    if _LAST_CAPABILITY is None:
        _LAST_CAPABILITY = _last_capability()
    _libc()
    regions = shared_with_children()
    # imported here, before the fork: a module another thread of the worker was importing as
    # it forked (an output drain starting) would be locked for good in the template
    from rlenv.world import reaper

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the template (coverage does not follow a fork)
        ours.close()
        _template_life(theirs, (run, inside), closing, output, regions, parent, reaper)
    theirs.close()
    ours.settimeout(TEMPLATE_ANSWER_S)
    _template = _Template(pid, os.pidfd_open(pid), ours)
    return _template


def _template_life(
    channel: socket.socket,
    calls: tuple[_Call, _Call],
    closing: list[int],
    output: tuple[int, int],
    regions: list[tuple[int, int, str]],
    parent: int,
    reaper: Any,
) -> None:
    """The template's life; never returns. One call at a time, as its worker asks: a request
    (its answer pipe's write end passed with it) forks a child that runs it, the child's pid
    goes back; "end" kills the child and whatever it left (orphans come to the template, a
    subreaper), and the child's wait status goes back."""
    code = 0
    try:
        libc = _libc()
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the worker ended before the signal was armed
            os._exit(0)
        if os.geteuid() == 0:
            # real and saved user ids that are not its children's: no process of theirs (uid
            # 0, no capability) may signal it (stop it, kill it) or see its /proc
            os.setresuid(_TEMPLATE_UID, 0, _TEMPLATE_UID)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for fd in closing:
            with contextlib.suppress(OSError):
                os.close(fd)
        _copy_privately(regions)
        if not drop_capabilities():
            raise PermissionError("could not drop capabilities")
        run, inside = calls
        while True:
            request = _request(channel)
            if request is None:
                return
            name, args, write_fd = request
            if write_fd < 0:  # a call for the template itself
                inside(name, args)
                channel.sendall(bytes(8))
                continue
            pid = os.fork()
            if pid == 0:
                channel.close()
                user = os.geteuid()
                os.setresuid(user, user, user)  # the world's user again, as every child was
                os.dup2(output[0], 1)
                os.dup2(output[1], 2)
                _answer(functools.partial(run, name, args), write_fd)
            os.close(write_fd)
            del name, args, request
            channel.sendall(pid.to_bytes(8, "big"))
            ended = _exactly(channel, 1)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            if not reaper._childless():
                reaper._kill_started(set())
            if not ended:
                return
            channel.sendall(status.to_bytes(8, "big", signed=True))
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _request(channel: socket.socket) -> tuple[str, tuple[Any, ...], int] | None:
    """In the template: the worker's next request, None when it is gone."""
    try:
        head, fds, _, _ = socket.recv_fds(channel, 8, 1)
    except OSError:
        return None
    rest = _exactly(channel, 8 - len(head)) if len(head) < 8 else b""
    if rest is None:
        return None
    body = _exactly(channel, int.from_bytes(head + rest, "big"))
    if body is None:
        return None
    name, args = pickle.loads(body)  # from the worker, its parent: trusted
    return name, args, fds[0] if fds else -1


def _exactly(channel: socket.socket, size: int) -> bytes | None:
    """`size` bytes from `channel`; None when it ends first."""
    data = bytearray()
    while len(data) < size:
        chunk = channel.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _from_template(size: int) -> bytes:
    assert _template is not None
    try:
        data = _exactly(_template.channel, size)
    except OSError as exc:  # its time ran out (socket.timeout), or it is gone
        raise TemplateLost(type(exc).__name__) from None
    if data is None:
        raise TemplateLost("it ended")
    return data


def _lose_template() -> None:
    """The template is killed and forgotten (the next call forks another from the worker);
    the call's child, if any, killed (it is this subreaper's orphan now: `settle` reaps)."""
    global _template
    template, _template = _template, None
    if template is None:
        return
    with contextlib.suppress(OSError):
        signal.pidfd_send_signal(template.pidfd, signal.SIGKILL)
    if template.child is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(template.child[1], signal.SIGKILL)
        os.close(template.child[1])
    with contextlib.suppress(ChildProcessError):
        os.waitpid(template.pid, 0)
    os.close(template.pidfd)
    template.channel.close()


def template_pid() -> int | None:
    return None if _template is None else _template.pid


# -- in the worker ------------------------------------------------------------------------------


def in_template(name: str, args: tuple[Any, ...]) -> None:
    """Call `name` in the template itself (`start_template`'s `in_template`), so that every
    later child starts with what it did; a template lost doing it is made again."""
    template = _template or _fork_template()
    payload = pickle.dumps((name, args))
    try:
        template.channel.sendall(len(payload).to_bytes(8, "big") + payload)
        _from_template(8)
    except (OSError, TemplateLost):
        _lose_template()


def in_child(
    name: str, args: tuple[Any, ...], *, took: list[float] | None = None
) -> tuple[str, Any]:
    """Call `name` with `args` in a child forked by the template (`start_template`); its answer
    as ("ok", decoded JSON) or ("raise", exception); `ChildDied` when it ended without one, or
    when the template was lost during the call. The child is ended after the reply is sent
    (`settle`). `took` (if given) gets the seconds from the request to the answer being read:
    the call's own time."""
    if _template is not None and _template.child is not None:  # a caller that did not settle
        _end_child()
    template = _template or _fork_template()
    payload = pickle.dumps((name, args))
    read_fd, write_fd = os.pipe()
    started = time.clock_gettime(time.CLOCK_MONOTONIC)  # freezegun leaves this clock alone
    try:
        try:
            socket.send_fds(template.channel, [len(payload).to_bytes(8, "big")], [write_fd])
            template.channel.sendall(payload)
            pid = int.from_bytes(_from_template(8), "big")
            template.child = (pid, os.pidfd_open(pid))  # not reaped before "end": still ours
        except (OSError, TemplateLost) as exc:
            _lose_template()
            raise ChildDied(f"its template process was lost ({exc})") from None
    finally:
        os.close(write_fd)
    try:
        data = _read_answer(read_fd, template.child[1])
    finally:
        os.close(read_fd)
        with contextlib.suppress(OSError):  # it answered (or died): nothing left for it to do
            signal.pidfd_send_signal(template.child[1], signal.SIGKILL)
    if took is not None:
        took.append(time.clock_gettime(time.CLOCK_MONOTONIC) - started)
    if _ended(template.pidfd):  # killed by the call's process: the call is not answered
        _lose_template()
        raise ChildDied("its process killed the template it was forked from")
    if data is None:
        status = _end_child()
        raise ChildDied(_how(status) if status >= 0 else "its template process was lost")
    try:
        message = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ChildDied(f"an answer that is not JSON ({type(exc).__name__})") from None
    return _decode(message)


def _end_child() -> int:
    """The template kills the call's child (and what it left) and reaps it: its wait status
    (-1: the template was lost)."""
    template = _template
    if template is None or template.child is None:
        return -1
    pid, pidfd = template.child
    template.child = None
    try:
        template.channel.sendall(b"e")
        return int.from_bytes(_from_template(8), "big", signed=True)
    except (OSError, TemplateLost):
        template.child = (pid, pidfd)  # killed with it
        _lose_template()
        return -1
    finally:
        if template.child is None:
            os.close(pidfd)


def settle() -> None:
    """After a call's reply is sent: its child ended and reaped, what it left killed (by the
    template, the subreaper its orphans come to), then whatever else this worker's children
    left (orphans of a lost template's children come here), so nothing of the call outlives it.
    A child that answered is at its ``os._exit``: the wait is the kernel's tear-down."""
    from rlenv.world.reaper import _childless, _kill_started

    _end_child()
    if not _childless():
        own = template_pid()
        _kill_started(set() if own is None else {own})


def _ended(pidfd: int) -> bool:
    ready, _, _ = select.select([pidfd], [], [], 0)
    return bool(ready)


def _read_answer(fd: int, pidfd: int) -> bytes | None:
    """The child's length-prefixed answer; None when it exits (or closes its end) without one.
    A process it left holding the pipe cannot keep the worker waiting: once the child is gone
    and nothing more is waiting in the pipe, it is over."""
    buffer = bytearray()
    needed: int | None = None
    while True:
        ready, _, _ = select.select([fd, pidfd], [], [])
        if fd not in ready:  # the child ended: what it wrote is in the pipe by now
            if select.select([fd], [], [], 0)[0]:
                continue
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        buffer += chunk
        if needed is None and len(buffer) >= 8:
            needed = int.from_bytes(buffer[:8], "big")
            if needed > MAX_ANSWER_BYTES:
                return None
        if needed is not None and len(buffer) >= 8 + needed:
            return bytes(buffer[8 : 8 + needed])


def _how(status: int) -> str:
    """As the orchestrator says it of a dead worker: ``killed by SIGKILL``, ``exit code 0``."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _decode(message: Any) -> tuple[str, Any]:
    if not isinstance(message, dict):
        raise ChildDied("an answer that is not a reply")
    if "raise" in message:
        name = str(message.get("raise"))[:100]
        given = message.get("args")
        args: list[Any] = given if isinstance(given, list) else []
        kind = RAISED.get(name)
        if kind is None:
            return "raise", _other_exception(name, args)
        exception = kind.__new__(kind)
        exception.args = tuple(args)
        state = message.get("state")
        if isinstance(state, dict):
            for key, value in state.items():
                if isinstance(key, str) and key.isidentifier() and not key.startswith("_"):
                    setattr(exception, key, value)
        return "raise", exception
    if "ok" in message and isinstance(message["ok"], dict):
        return "ok", message["ok"]
    raise ChildDied("an answer that is not a reply")


def _other_exception(name: str, args: list[Any]) -> Exception:
    """What a child's call raised that is not the caller's to classify: a built-in exception
    of that name when there is one (its text only), else a RuntimeError naming it."""
    import builtins

    text = str(args[0]) if args else ""
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Exception):
        with contextlib.suppress(Exception):
            return found(text)  # type: ignore[no-any-return]
    return RuntimeError(f"{name}: {text}" if text else name)


def as_answer(value: Any) -> dict[str, Any]:
    """`value` as a child would have answered it (encoded, then decoded as data): a call the
    worker runs itself gives its caller exactly what a child's would."""
    kind, answer = _decode(json.loads(_encode(("ok", value))))
    assert kind == "ok"
    return answer  # type: ignore[no-any-return]


def as_outcome(value: dict[str, Any]) -> ToolOutcome:
    """A tool's outcome from a child's answer (TypeError when it is not one)."""
    fields = value.get("fields")
    if not isinstance(fields, dict):
        raise TypeError("not a tool's outcome")
    return ToolOutcome(**fields)


def as_trajectory(value: dict[str, Any]) -> Trajectory:
    """A trajectory from a child's answer (TypeError when it is not one)."""
    fields = value.get("fields")
    if not isinstance(fields, dict) or not isinstance(fields.get("messages"), list):
        raise TypeError("not a trajectory")
    return Trajectory(**fields)
