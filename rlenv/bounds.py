"""What a rollout's inputs from the model, a tool or in-world code may be: bounded data.

A policy's reply, a tool's result and every message a frozen-world worker sends are read by
code that walks, copies, pickles, hashes and writes them. Unbounded, one adversarial completion
(tool-call arguments nested 200,000 deep, a lone surrogate, an integer of 5,000 digits, a
reply of a gigabyte) ended the whole run with a RecursionError or UnicodeEncodeError. Here is
the one check, made where such a value is read (`rlenv.providers.python`, `rlenv.agent`, the
worker's tool call, `rlenv.executors.replies`): a value out of bounds is that rollout's
status, with the reason, never the run's end.

Walked without recursion: the check itself cannot overflow the stack.
"""

from __future__ import annotations

import json
import marshal
import math
from typing import Any

import orjson

from rlenv.canonical import MAX_DEPTH, SAFE_INTEGER, canonical_bytes

MAX_REPLY_BYTES = 8 << 20
"""The largest reply of a policy or a model, and the largest tool result (8 MiB of text)."""
MAX_TOOL_CALLS = 1024
"""The most tool calls one reply may make."""
MAX_RECORD_BYTES = 256 << 20
"""The largest message a worker sends (a record: the conversation, its tool results, its
output); a reply and a tool result are each bounded above, so only a forged message is bigger."""
MAX_ERROR_CHARS = 64 << 10
"""The longest error message a worker may send with an exception."""


class OutOfBounds(ValueError):
    """A value from the model, a tool or in-world code that is not bounded data."""


def _where(path: list[str | int]) -> str:
    """The path as ``a.b[2]``; a key that is not a plain name is quoted (``["\\n"]``), so the
    message stays one line whatever the keys hold."""

    def step(part: str | int) -> str:
        if isinstance(part, int):
            return f"[{part}]"
        return f".{part}" if part.isidentifier() and part.isascii() else f"[{part!r}]"

    return "".join(step(part) for part in path).lstrip(".")


def _text_problem(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate (U+{ord(text[exc.start]):04X}), which is not UTF-8 text"
    return None


def bounds_problem(
    value: Any,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int = MAX_REPLY_BYTES,
    finite: bool = False,
    any_leaf: bool = False,
) -> str | None:
    """What makes `value` not bounded JSON data, with where in it; None when it is.

    Refused: nesting deeper than `max_depth`, more than about `max_bytes` of text in all
    (strings and keys as UTF-8, 8 bytes a number), a lone surrogate in a string or key, an
    integer beyond +/-(2**53 - 1) (canonical JSON cannot hold it), a key that is not a
    string, and any type that is not JSON. NaN and infinities are taken (a record writes them
    as null, as its digest sees them) unless `finite`; with `any_leaf`, a value of another
    type is taken as a leaf (whoever serialises it says what is wrong with it)."""
    if not finite and not any_leaf and _surely_bounded(value, max_depth, max_bytes):
        return None
    if _bounded(value, max_depth, max_bytes, finite, any_leaf):
        return None
    # the walk below keeps each value's path, to say where the problem is: only when there is one
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 0, [])]
    size = 0
    while stack:
        item, depth, path = stack.pop()
        kind = type(item)
        if kind is str:
            size += len(item)
            problem = _text_problem(item)
        elif item is None or kind is bool:
            size += 4
            continue
        elif kind is int:
            size += 8
            problem = (
                None
                if -SAFE_INTEGER <= item <= SAFE_INTEGER
                else "is an integer beyond +/-(2**53 - 1), which canonical JSON cannot hold"
            )
        elif kind is float:
            size += 8
            problem = "is not a finite number" if finite and not math.isfinite(item) else None
        elif kind is dict or kind is list or kind is tuple:
            if depth >= max_depth:
                return f"{_at(path)}is nested more than {max_depth} levels deep"
            size += 2
            if kind is dict:
                for key, child in item.items():
                    if type(key) is not str:
                        return f"{_at(path)}has a key that is a {type(key).__name__}, not a string"
                    key_problem = _text_problem(key)
                    if key_problem:
                        return f"{_at(path)}has a key that {key_problem}"
                    size += len(key)
                    stack.append((child, depth + 1, [*path, key]))
            else:
                stack.extend((child, depth + 1, [*path, index]) for index, child in enumerate(item))
            problem = None
        elif any_leaf:
            size += 8
            continue
        else:
            return f"{_at(path)}is a {kind.__name__}, not JSON data"
        if problem:
            return f"{_at(path)}{problem}"
        if size > max_bytes:
            return f"is larger than {max_bytes >> 20} MiB"
    return None


_DIGIT_MASK = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x2E for byte in range(256))
"""`bytes.translate` table: each ASCII digit to "1", every other byte to "."."""


def has_digit_run(text: bytes, length: int) -> bool:
    """Whether `text` holds `length` ASCII digits in a row (in C: a regex took 60 us a line)."""
    return b"1" * length in text.translate(_DIGIT_MASK)


_SAFE_DIGITS = len(str(SAFE_INTEGER))  # 16: an integer of fewer digits is always in range


def _surely_bounded(value: Any, max_depth: int, max_bytes: int) -> bool:
    """True only when `value` is bounded data (as `_bounded` decides it, with `finite` and
    `any_leaf` off), decided in C: a record's check was a Python walk of every value, the
    orchestrator's largest cost per rollout after the network. False says nothing (the walk
    decides then).

    `marshal` takes only the exact built-in types (no subclass, no other class) and `orjson`
    only JSON's among them (no bytes, set, complex) with string keys and UTF-8 text (no lone
    surrogate), so together they take JSON data of exact types, whose integers fit 64 bits.
    On orjson's text: the size is at most 8 units per byte (a number counts 8, any other
    byte at most 1); the nesting at most its count of brackets; and an integer beyond
    +/-(2**53 - 1) is a run of 16 digits or more above SAFE_INTEGER (a float's or a string's
    digits only make this answer False)."""
    try:
        marshal.dumps(value)
        text = orjson.dumps(value)
    except Exception:  # TypeError, ValueError, orjson's recursion limit...
        return False
    if len(text) * 8 > max_bytes or text.count(b"[") + text.count(b"{") > max_depth:
        return False
    mask = text.translate(_DIGIT_MASK)
    run = b"1" * _SAFE_DIGITS
    start = mask.find(run)
    while start >= 0:
        end = start + _SAFE_DIGITS
        if mask[end : end + 1] == b"1" or int(text[start:end]) > SAFE_INTEGER:
            return False
        start = mask.find(run, end)
    return True


def _bounded(value: Any, max_depth: int, max_bytes: int, finite: bool, any_leaf: bool) -> bool:
    """`bounds_problem(...) is None`, decided by the same walk without the paths (a results
    line's check was the orchestrator's largest cost per rollout after the network)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    size = 0
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is str:
            size += len(item)
            if not item.isascii() and _text_problem(item):
                return False
        elif item is None or kind is bool:
            size += 4
            continue
        elif kind is int:
            size += 8
            if not -SAFE_INTEGER <= item <= SAFE_INTEGER:
                return False
        elif kind is float:
            size += 8
            if finite and not math.isfinite(item):
                return False
        elif kind is dict:
            if depth >= max_depth:
                return False
            size += 2
            depth += 1
            for key, child in item.items():
                if type(key) is not str or (not key.isascii() and _text_problem(key)):
                    return False
                size += len(key)
                push((child, depth))
        elif kind is list or kind is tuple:
            if depth >= max_depth:
                return False
            size += 2
            depth += 1
            stack.extend([(child, depth) for child in item])
        elif any_leaf:
            size += 8
            continue
        else:
            return False
        if size > max_bytes:
            return False
    return True


def _at(path: list[str | int]) -> str:
    return f"at {_where(path)} " if path else ""


def check_bounded(value: Any, what: str, **limits: Any) -> None:
    """Raise `OutOfBounds` ("WHAT PROBLEM") when `value` is not bounded data."""
    problem = bounds_problem(value, **limits)
    if problem is not None:
        raise OutOfBounds(f"{what} {problem}")


def nesting_problem(text: str, *, max_depth: int = MAX_DEPTH) -> str | None:
    """Whether JSON text (tool-call arguments) nests deeper than `max_depth`; None when it
    does not or is not JSON at all (reading it says what is wrong then)."""
    if text.count("[") + text.count("{") <= max_depth:
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        return f"is nested more than {max_depth} levels deep"
    except ValueError:
        return None
    return bounds_problem(value, max_depth=max_depth, max_bytes=len(text) * 8 + 64)


def reply_problem(message: Any) -> str | None:
    """What makes a policy's or model's reply (an assistant message, before or after it was
    normalised) not one a rollout can keep: its size, depth and text, the number of tool
    calls, and the nesting of each call's arguments."""
    problem = bounds_problem(message)
    if problem is not None:
        return problem
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list):
        return None
    if len(calls) > MAX_TOOL_CALLS:
        return f"makes {len(calls):,} tool calls (at most {MAX_TOOL_CALLS:,} in one reply)"
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            found = nesting_problem(arguments)
            if found is not None:
                return f"at tool_calls[{number}].function.arguments {found}"
    return None


def bounded_text(text: str, what: str, *, max_bytes: int = MAX_REPLY_BYTES) -> str:
    """`text` when it is at most `max_bytes` of UTF-8 text; else `OutOfBounds`."""
    if len(text) > max_bytes:
        raise OutOfBounds(f"{what} is larger than {max_bytes >> 20} MiB")
    problem = _text_problem(text)
    if problem is not None:
        raise OutOfBounds(f"{what} {problem}")
    return text


def tool_content(name: str, result: Any) -> str:
    """A tool's result as the text the model reads (a string as it is, anything else as
    canonical JSON); `OutOfBounds` when it is not bounded data (the rollout's ``tool_error``).
    A value that is not JSON raises as canonical JSON does (the model is told the error)."""
    what = f"tool {name}'s result"
    if isinstance(result, str):
        return bounded_text(result, what)
    check_bounded(result, what, any_leaf=True)
    return bounded_text(canonical_bytes(result).decode(), what)
