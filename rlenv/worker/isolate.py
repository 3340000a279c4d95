"""Env code in a process of its own per call (issue 26): a forged reply costs one rollout at most.

A local worker holds the orchestrator's pipe and runs no env code itself. Once, when it starts
in its own mount namespace (`rlenv.executors.local`), it makes private places
(`rlenv.worker.places`) and stops being dumpable (`rlenv.worker.privileges`). Once its world is
loaded, before any call, it forks its *template* (`rlenv.worker.template`), which drops every
capability and then, for every call that runs env code, forks a child that runs the call and
writes its answer to the worker as JSON (data only, bounded) through a pipe the worker passed
with the request, then exits.

This module is that answer: written by the child (`_answer`), read (`_read_answer`) and decoded
(`_decode`, `as_outcome`, `as_trajectory`) by the worker, `ChildDied` when there is none. The
worker reads that answer as data about the call it made, for the rollout it made it for, and
sends the orchestrator its own reply: nothing the child writes reaches the orchestrator as a
message. The child's python state (module globals, ``os.environ``, patched builtins, open
files) dies with it, so no later rollout sees it. A whole rollout is one child, the
conversation (policy and tools), whose trajectory comes back as data; the worker grades it
itself (policy and tool code never ran in the worker, so a policy cannot patch the verifiers
that grade it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import sys
from collections.abc import Callable
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


class ChildDied(Exception):
    """The child ended without an answer (killed, or env code ended its process): how."""


# -- in the child ----------------------------------------------------------------------------


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


# -- in the worker ------------------------------------------------------------------------------


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


def as_said(value: dict[str, Any]) -> str | None:
    """A user's message from a child's answer (TypeError when it is not one)."""
    said = value.get("value")
    if said is not None and not isinstance(said, str):
        raise TypeError(f"a user's message that is a {type(said).__name__}")
    return said


def as_trajectory(value: dict[str, Any]) -> Trajectory:
    """A trajectory from a child's answer (TypeError when it is not one)."""
    fields = value.get("fields")
    if not isinstance(fields, dict) or not isinstance(fields.get("messages"), list):
        raise TypeError("not a trajectory")
    return Trajectory(**fields)
