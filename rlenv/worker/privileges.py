"""What a call's child may not do or reach (`rlenv.worker.isolate`): the worker, once, stops
being dumpable (`not_dumpable`: no process without a capability may ptrace it or open its
memory or file descriptors through /proc) and hands the files it keeps to nobody
(`keep_from_children`); its template, before it forks any child, swaps the worker's shared
mappings a call could write through for private copies (`shared_with_children`) and drops every
capability (effective, permitted, inheritable and the bounding set, so an ``exec`` cannot regain
any) and sets ``PR_SET_NO_NEW_PRIVS`` (`drop_capabilities`): nothing forked from it can ptrace
the worker, write its memory, take the private mounts off, change them, or join another
namespace (a user namespace of its own sees them locked).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

_PROT_READ, _PROT_WRITE = 1, 2
_MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 2, 16, 32
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522

_NOBODY = 65534  # the owner of what no call's child may change (kept files, the view's root)

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


# -- the worker out of its children's reach: itself, its own files, its shared mappings -----


def not_dumpable() -> bool:
    """This process may not be ptraced, nor its memory or descriptors opened through /proc, by
    any process without CAP_SYS_PTRACE (its call children hold none)."""
    return int(_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


SHARED_WITH_CHILDREN = ("faketime_shm_", "faketime_sem_")
"""Shared mappings a child inherits from its worker that no call may write through: libfaketime's
shared memory and semaphore (what one rollout wrote there, the next would read); and those of
`kept` (the worker's own semaphores, `keep_from_children`)."""

kept: tuple[str, ...] = ()
"""Files of /dev/shm the worker made as it started and keeps (a reward model's joblib/loky
semaphores: removed, they were a traceback when the worker exits)."""


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


# -- capabilities: the template's, dropped before it forks any child ------------------------


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 63


_LAST_CAPABILITY: int | None = None


def before_fork() -> list[tuple[int, int, str]]:
    """In the worker, before it forks its template: the last capability's number read and the C
    library loaded (the template inherits both: nothing to read or load after the fork), and the
    shared mappings a child must copy (`shared_with_children`)."""
    global _LAST_CAPABILITY
    if _LAST_CAPABILITY is None:
        _LAST_CAPABILITY = _last_capability()
    _libc()
    return shared_with_children()


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
