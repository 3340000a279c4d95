"""Nothing a worker or a rollout starts outlives it.

A worker asks the kernel for SIGKILL when its parent (the orchestrator) dies, and watches its
parent pid as a second guard (the parent-death signal follows the thread that spawned it). It is
also a child subreaper: a process that a tool detaches (`start_new_session=True`, a double fork)
is re-parented to the worker instead of init, so after every call the worker can find and kill
every process the call started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import threading
import time
from collections.abc import Iterator

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def bind_to_parent(parent: int) -> None:
    """Die with the orchestrator: parent-death signal, subreaper, and a parent-pid watch.

    A worker that is pid 1 of its own pid namespace cannot see its parent (`getppid` is 0):
    there the chain `setpriv --pdeathsig KILL unshare --kill-child` that started it does the
    same (see `rlenv.world.netguard.netns_prefix`), and every process in the namespace dies
    with it."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if os.getpid() == 1:
        return
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="rlenv-parent-watch", daemon=True).start()


def kill_tree(pids: set[int]) -> None:
    """SIGSTOP then SIGKILL each process and its descendants (stopped ones cannot fork)."""
    found: dict[int, psutil.Process] = {}
    pending = set(pids)
    while pending:
        pid = pending.pop()
        if pid in found:
            continue
        try:
            process = psutil.Process(pid)
            process.send_signal(signal.SIGSTOP)
            found[pid] = process
            pending.update(child.pid for child in process.children(recursive=True))
        except psutil.Error:
            continue
    for process in found.values():
        with contextlib.suppress(psutil.Error):
            process.kill()
    _wait_ended(set(found), 5.0)
    reap_zombies()


def _wait_ended(pids: set[int], seconds: float) -> None:
    """Wait (at most `seconds` of real time: the world's clock is frozen) until each process
    has ended, a zombie or gone. Through pidfds, which work for every kind of child: psutil's
    wait never ends for a zombie it cannot reap, e.g. a raw ``clone`` child."""
    handles = []
    for pid in pids:
        with contextlib.suppress(OSError):
            handles.append(os.pidfd_open(pid))
    try:
        poller = select.poll()
        for handle in handles:
            poller.register(handle, select.POLLIN)
        clock = time.CLOCK_MONOTONIC
        deadline = time.clock_gettime(clock) + seconds
        waiting = len(handles)
        while waiting and (left := deadline - time.clock_gettime(clock)) > 0:
            for handle, _ in poller.poll(left * 1000):
                poller.unregister(handle)
                waiting -= 1
    finally:
        for handle in handles:
            os.close(handle)


_WALL = 0x40000000
"""``__WALL``: wait for children of every kind, those whose exit signal is not SIGCHLD (a raw
``clone``) too; plain ``waitpid(-1)`` does not see them."""


def reap_zombies() -> None:
    """Collect the exit status of any finished child (orphans re-parented to this subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG | _WALL)
        except ChildProcessError:
            return
        if pid == 0:
            return


@contextlib.contextmanager
def no_leftovers() -> Iterator[None]:
    """Around one worker call: every process that appeared under this one during it is killed.

    A process with no child at all (the common case) needs no look at /proc: one `waitid`
    says so before the call and, if nothing the call started is still there (running or a
    zombie), after it. Anything it started, forked, cloned or orphaned to this subreaper is
    a child of one of its threads until it is reaped, so "no child" means nothing survived."""
    before = None if _childless() else _direct_children()
    try:
        yield
    finally:
        if before is not None or not _childless():
            _kill_started(before or set())


def _kill_started(before: set[int]) -> None:
    started = _direct_children() - before
    if started:
        kill_tree(started)  # with their descendants
    reap_zombies()


def _childless() -> bool:
    """True when this process has no child of any kind, running or a zombie, in any of its
    threads (one ``waitid`` that reaps nothing)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
    except ChildProcessError:
        return True
    except OSError:  # a kernel whose waitid refuses __WALL (before 4.7): look at /proc
        return False
    return False


QUIET_THREADS: set[str] = set()
"""Native ids of this process's own threads that never start a process (the worker's output
drains): `_direct_children` does not read their children files."""


def _direct_children() -> set[int]:
    """This process's children: cheap from /proc/self/task/*/children (a subreaper's orphans
    become direct children, so the direct ones and their trees are everything); psutil's full
    process scan where that file is missing."""
    found: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            if task in QUIET_THREADS:
                continue
            with open(f"/proc/self/task/{task}/children") as handle:
                found.update(int(pid) for pid in handle.read().split())
    except OSError:
        return {child.pid for child in psutil.Process().children()}
    return found
