"""The template (`start_template`): forked once from a local worker, once its world is loaded
and before any call, the process every call's child is forked from (`in_child`). It:

- closes the orchestrator's pipe, the worker's handles on its private places
  (`rlenv.worker.places`) and the output drains' read ends;
- drops every capability and sets ``PR_SET_NO_NEW_PRIVS`` (`rlenv.worker.privileges`): nothing
  forked from it can ptrace the worker, write its memory, take the private mounts off, change
  them, or join another namespace;
- takes real and saved user ids that are not its children's, so none of them can signal it;
- then, for every call that runs env code, forks a child that runs the call and writes its
  answer to the worker as JSON (data only, bounded: `rlenv.worker.isolate`) through a pipe the
  worker passed with the request, then exits.

So every call's env code starts from the world as it was loaded, never from the worker as
earlier rollouts' grading left it, and the worker itself forks nothing per call (a fork
write-protected its pages: hundreds of copy-on-write faults in the worker per rollout). After
the reply is sent (`settle`, off the rollout's time) the template reaps the child and kills what
it left running (a subreaper, it gets the orphans), and the worker puts a fresh layer on each
private place the call wrote (`rlenv.worker.places.PrivatePlaces.renew`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import os
import pickle
import select
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from rlenv.worker.isolate import ChildDied, _answer, _decode, _read_answer
from rlenv.worker.privileges import _copy_privately, _libc, before_fork, drop_capabilities

_TEMPLATE_UID = 2_000_000_000
"""The template's real and saved user id (`_template_life`): not its children's (uid 0), so
no process of theirs may signal it, and no other account's: nobody's (65534) is the sandbox's
(`rlenv.sandbox.limits.SANDBOX_UID`), whose RLIMIT_NPROC counts every process of that real uid
on the machine, so templates as nobody (one per worker, of every run) left a sandboxed program
no process to start. A uid from the range no distribution or container manager hands out."""

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
    global _template
    assert _template_start is not None, "start_template first"
    run, closing, output, inside = _template_start
    regions = before_fork()
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


def _how(status: int) -> str:
    """As the orchestrator says it of a dead worker: ``killed by SIGKILL``, ``exit code 0``."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"
