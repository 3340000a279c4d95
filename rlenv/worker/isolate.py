"""Env code in a process of its own per call (issue 26): a forged reply costs one rollout at most.

A local worker holds the orchestrator's pipe and runs no env code itself. For every call that
runs env code it forks a child (after its imports, so cheap) that:

- closes the orchestrator's pipe (the only way to it: a socket cannot be reopened through
  /proc, and without capabilities the child can neither ptrace its parent nor take its file
  descriptors or memory);
- gets its own mount namespace with a private /var/tmp (a fresh tmpfs) and /tmp and $HOME as
  overlays on the host's (reads see the host's files, writes stay in the child's tmpfs), the
  worker's work root (and grader cache) kept as they are: what a rollout writes there is gone
  when it ends;
- moves into a user namespace of its own, where it holds no capability over the worker (no
  ptrace, no taking its descriptors or memory) and the mounts above are locked in place;
- runs the call and writes its answer to the parent as JSON (data only, bounded), then exits.

The worker reads that answer as data about the call it made, for the rollout it made it for,
and sends the orchestrator its own reply: nothing the child writes reaches the orchestrator as
a message. The child's python state (module globals, ``os.environ``, patched builtins, open
files) dies with it, so no later rollout sees it. A whole rollout runs as two children: the
conversation (policy and tools), whose trajectory comes back as data, then the grading, forked
from the untouched worker, so a policy cannot patch the verifiers that grade it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import select
import signal
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

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 32, 4096
_MS_REC, _MS_PRIVATE = 16384, 1 << 18
_PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522


class ChildDied(Exception):
    """The child ended without an answer (killed, or env code ended its process): how."""


# -- in the child ----------------------------------------------------------------------------


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


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


def private_places(keep: list[str]) -> list[str]:
    """A mount namespace of this process's own: /var/tmp a fresh tmpfs, /tmp and $HOME
    overlays on the host's (their writes stay in that tmpfs), the directories in `keep` (the
    work root, the grader cache) bound back as they are. What was made private, by path ([]
    when this process may not mount: then every place stays shared)."""
    libc = _libc()
    if libc.unshare(_CLONE_NEWNS) != 0:
        return []
    if not _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE):
        return []
    kept: list[tuple[str, int]] = []
    for path in keep:
        with contextlib.suppress(OSError):
            kept.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))
    made: list[str] = []
    scratch = "/var/tmp"
    options = "mode=1777,size=256m"
    if os.path.isdir(scratch) and _mount(
        libc, "rlenv-tmp", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, options
    ):
        made.append(scratch)
        home = os.path.realpath(os.path.expanduser("~"))
        places = ["/tmp"]
        shared = any(Path(home).is_relative_to(p) for p in ("/tmp", scratch))
        if os.path.isdir(home) and not shared and home != "/":
            places.append(home)
        for index, place in enumerate(places):
            upper, work = f"{scratch}/.rlenv-{index}-upper", f"{scratch}/.rlenv-{index}-work"
            os.mkdir(upper, 0o1777 if place == "/tmp" else 0o755)
            os.mkdir(work)
            data = f"lowerdir={place},upperdir={upper},workdir={work}"
            if _mount(libc, "rlenv-overlay", place, "overlay", 0, data):
                made.append(place)
    for path, fd in kept:
        if any(Path(path).is_relative_to(place) for place in made):
            _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND)
        os.close(fd)
    return made


def leave_capabilities(handshake: tuple[int, int]) -> bool:
    """No capability left over the worker, its mounts or its processes: the child moves into a
    user namespace of its own and a mount namespace under it, where the mounts `private_places`
    made are locked together (none can be taken off to show what it covers); the worker maps
    every uid and gid to itself there (`_map_identity`: the child's files are as the worker's
    would be, the sandbox can still switch to its own uid). Inside, it may make namespaces of
    its own (the code verifiers' sandbox does). Without user namespaces, every capability is
    dropped. `handshake`: (to the worker, from the worker)."""
    libc = _libc()
    told, answered = handshake
    entered = libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) == 0
    os.write(told, b"u" if entered else b"n")
    mapped = os.read(answered, 1) == b"m"
    if entered and mapped:
        return True
    return drop_capabilities()


def _map_identity(pid: int) -> bool:
    """In the worker: map every uid and gid of child `pid`'s user namespace to itself."""
    try:
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{pid}/{name}").write_text("0 0 4294967295")
    except OSError:
        return False
    return True


def drop_capabilities() -> bool:
    """No capability left, none to regain through exec (the bounding set emptied): the child
    cannot remount, ptrace its parent or take its file descriptors."""
    libc = _libc()
    for capability in range(64):
        dropped = libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) == 0
        if not dropped and ctypes.get_errno() == 22:  # EINVAL: past the last capability
            break
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    return int(libc.capset(header, data)) == 0


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


def _child(
    body: Callable[[], Any],
    write_fd: int,
    closing: list[int],
    keep: list[str],
    handshake: tuple[int, int],
) -> None:
    """The forked child's life; never returns."""
    code = 0
    try:
        for fd in closing:
            with contextlib.suppress(OSError):
                os.close(fd)
        private_places(keep)
        leave_capabilities(handshake)
        for fd in handshake:
            os.close(fd)
        try:
            reply: tuple[str, Any] = ("ok", body())
        except Exception as exc:
            reply = ("raise", exc)
        except BaseException as exc:  # SystemExit from env code that escaped its handler
            reply = ("raise", RuntimeError(f"{type(exc).__name__}: {exc}"))
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


# -- in the worker ------------------------------------------------------------------------------


def in_child(
    body: Callable[[], Any],
    *,
    closing: list[int],
    keep: list[str],
    took: list[float] | None = None,
) -> tuple[str, Any]:
    """Run `body` in a forked child (see the module); its answer as ("ok", decoded JSON) or
    ("raise", exception); `ChildDied` when it ended without one. `took` (if given) gets the
    seconds from the child's namespaces being ready to its answer being read: the call's own
    time, without the fork and the namespaces (which are not the rollout's to pay for)."""
    read_fd, write_fd = os.pipe()
    told_read, told_write = os.pipe()
    answer_read, answer_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (coverage does not follow a fork)
        for fd in (read_fd, told_read, answer_write):
            os.close(fd)
        _child(body, write_fd, closing, keep, (told_write, answer_read))
    for fd in (write_fd, told_write, answer_read):
        os.close(fd)
    try:
        entered = os.read(told_read, 1) == b"u"
        with contextlib.suppress(OSError):  # a child already gone: found below
            os.write(answer_write, b"m" if entered and _map_identity(pid) else b"n")
    finally:
        os.close(told_read)
        os.close(answer_write)
    ready = time.clock_gettime(time.CLOCK_MONOTONIC)  # freezegun leaves this clock alone
    try:
        data = _read_answer(read_fd, pid)
    finally:
        os.close(read_fd)
    if took is not None:
        took.append(time.clock_gettime(time.CLOCK_MONOTONIC) - ready)
    status = _reap(pid)
    if data is None:
        raise ChildDied(_how(status))
    try:
        message = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ChildDied(f"an answer that is not JSON ({type(exc).__name__})") from None
    return _decode(message)


def _read_answer(fd: int, pid: int) -> bytes | None:
    """The child's length-prefixed answer; None when it exits (or closes its end) without one.
    A process it left holding the pipe cannot keep the worker waiting: once the child is gone
    and nothing more is waiting in the pipe, it is over."""
    buffer = bytearray()
    needed: int | None = None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            buffer += chunk
        elif _exited(pid):
            ready, _, _ = select.select([fd], [], [], 0)
            if not ready:
                return None
            continue
        if needed is None and len(buffer) >= 8:
            needed = int.from_bytes(buffer[:8], "big")
            if needed > MAX_ANSWER_BYTES:
                return None
        if needed is not None and len(buffer) >= 8 + needed:
            return bytes(buffer[8 : 8 + needed])


_reaped: dict[int, int] = {}


def _exited(pid: int) -> bool:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    if done:
        _reaped[pid] = status
    return bool(done)


def _reap(pid: int) -> int:
    if pid in _reaped:
        return _reaped.pop(pid)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 0
    return status


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


def as_record(value: dict[str, Any]) -> dict[str, Any]:
    record = value.get("value")
    if not isinstance(record, dict):
        raise TypeError("not a record")
    return record


def as_graded(value: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    parts = value.get("tuple")
    if not (isinstance(parts, list) and len(parts) == 3 and isinstance(parts[0], dict)):
        raise TypeError("not a graded record")
    if not all(type(count) is int for count in parts[1:]):
        raise TypeError("not a graded record")
    return parts[0], parts[1], parts[2]
