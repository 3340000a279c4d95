"""Fuzzing the worker -> orchestrator channel and the record writer (issue 26 item 1).

Whatever a worker (or in-world code writing to its pipe) sends, read the way the local executor
reads it (`wire.frames`, `LocalExecutor._message`, `rlenv.executors.replies.checked`), is either
the reply the call expects, made of bounded data that `encode_line` writes as strict JSON, or
("unsafe", one line): never an exception. Values: deep nesting, large sizes, control
characters, lone surrogates, NaN and infinities, integers of any size, keys that are not strings.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import pickle
import struct
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rlenv.agent import ToolCrash, ToolOutcome, parse_arguments
from rlenv.bounds import MAX_TOOL_CALLS, OutOfBounds, bounds_problem, reply_problem, tool_content
from rlenv.errors import FixtureMiss, PolicyCrash
from rlenv.executors import wire
from rlenv.executors.local import LocalExecutor
from rlenv.executors.replies import checked
from rlenv.providers.python import normalise_reply
from rlenv.results import ResultsWriter, encode_line
from rlenv.worker.config import RolloutTask

TASK = RolloutTask(1, 0)
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)  # surrogates too
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()  # any size
    | st.floats(allow_nan=True, allow_infinity=True)
    | ANY_TEXT
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(ANY_TEXT | st.integers(), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=30,
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def _strict(line: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"line holds {name}")

    return json.loads(line, parse_constant=refuse)


def _framed(data: bytes) -> bytes:
    return struct.pack("!i", len(data)) + data


def _read(name: str, data: bytes) -> tuple[str, Any] | None:
    """`data` as one frame read off a worker's pipe and checked as the reply to `name`."""
    buffer = bytearray(_framed(data))
    try:
        frames = wire.frames(buffer)
    except wire.UnsafeMessage:
        return ("unsafe", "frame")
    (frame,) = frames
    return checked(name, LocalExecutor._message(frame), TASK)


def _record(value: Any) -> dict[str, Any]:
    return {"input_id": "bad", "input_index": 1, "rollout": 0, "status": "ok", "answer": value}


def _accepted_is_writable(message: tuple[str, Any] | None, tmp: Path) -> None:
    assert message is not None
    kind, value = message
    assert isinstance(kind, str), message  # other kinds ("done"...): their caller's to judge
    if kind == "unsafe":
        assert value is None or (isinstance(value, str) and "\n" not in value and len(value) < 1000)
        return
    if kind == "ok" and isinstance(value, dict):
        line = encode_line(value)
        _strict(line)
        writer = ResultsWriter(tmp / "results.jsonl")
        writer.write(value)
        writer.close()


@FUZZ
@given(value=VALUES)
def test_a_record_read_off_the_pipe_is_bounded_data_or_refused(
    value: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = pickle.dumps(("ok", _record(value)))
    message = _read("run_rollout", data)
    _accepted_is_writable(message, tmp_path_factory.mktemp("w"))
    assert message is not None
    if message[0] == "ok":
        assert bounds_problem(value, max_depth=120) is None


@FUZZ
@given(value=VALUES, name=st.sampled_from(["run_rollout", "tool", "finish", "grade", "prepare"]))
def test_any_value_as_any_reply_never_raises(
    value: Any, name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    for message in (("ok", value), ("raise", ValueError(value)), ("done", value), value):
        try:
            data = pickle.dumps(message)
        except Exception:
            continue
        _accepted_is_writable(_read(name, data), tmp_path_factory.mktemp("w"))


@FUZZ
@given(content=ANY_TEXT, error=st.none() | ANY_TEXT, frames=st.lists(VALUES, max_size=3))
def test_a_tool_outcome_or_exception_holds_only_bounded_text(
    content: str, error: str | None, frames: list[Any]
) -> None:
    outcome = ToolOutcome(content, "hit", True, error, frames)  # type: ignore[arg-type]
    for sent in (
        ("ok", outcome),
        ("raise", ToolCrash(content, frames)),
        ("raise", FixtureMiss(error)),
    ):
        message = _read("tool", pickle.dumps(sent))
        assert message is not None
        if message[0] != "unsafe":
            state = dict(vars(message[1]))
            if isinstance(message[1], BaseException):
                state["args"] = list(message[1].args)
            assert bounds_problem(state, max_bytes=1 << 30) is None


@pytest.mark.parametrize("depth", [130, 1_000, 200_000])
@pytest.mark.parametrize("name", ["run_rollout", "finish", "grade", "tool"])
def test_a_hand_pickled_deep_value_is_refused(name: str, depth: int) -> None:
    """pickle.dumps cannot nest so deep; in-world code can write the bytes itself."""
    marker = pickle.dumps(123456789, protocol=2)[2:-1]
    deep = b"]" * depth + b"a" * (depth - 1)
    record = pickle.dumps(("ok", _record(123456789)), protocol=2).replace(marker, deep)
    if name == "grade":
        record = pickle.dumps(("ok", (_record(123456789), 0, 0)), protocol=2).replace(marker, deep)
    if name == "tool":
        outcome = ToolOutcome("x", "hit", True, None, [123456789])  # type: ignore[list-item]
        record = pickle.dumps(("ok", outcome), protocol=2).replace(marker, deep)
    message = _read(name, record)
    assert message is not None and message[0] == "unsafe", message
    assert "nested more than" in message[1]


@FUZZ
@given(raw=ANY_TEXT | st.builds(json.dumps, VALUES) | st.builds(str, VALUES))
def test_tool_call_arguments_are_a_bounded_object_or_a_value_error(raw: str) -> None:
    try:
        arguments = parse_arguments(raw)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(arguments, dict)
    assert bounds_problem(arguments) is None


@FUZZ
@given(reply=VALUES | st.fixed_dictionaries({"content": ANY_TEXT, "tool_calls": VALUES}))
def test_a_policy_reply_is_a_message_or_the_policys_error(reply: Any) -> None:
    from rlenv.errors import ModelOutputError

    try:
        message = normalise_reply(reply)
    except (PolicyCrash, ModelOutputError):
        return
    assert reply_problem(message) is None
    _strict(encode_line({"message": message}))


@FUZZ
@given(result=VALUES)
def test_a_tool_result_is_bounded_text_or_the_tools_error(result: Any) -> None:
    try:
        content = tool_content("t", result)
    except OutOfBounds:
        return
    except (TypeError, ValueError):  # not JSON: the model is told (as canonical JSON raises)
        return
    content.encode("utf-8")
    if not isinstance(result, str) and not _has_nan(result):
        assert json.loads(content) is not None or content == "null"


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_nan(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nan(item) for item in value)
    return False


def test_too_many_tool_calls_is_the_policys_error() -> None:
    call = {"function": {"name": "t", "arguments": "{}"}}
    with pytest.raises(PolicyCrash, match="tool calls"):
        normalise_reply({"tool_calls": [call] * (MAX_TOOL_CALLS + 1)})


@FUZZ
@example(value=float("nan"), max_depth=3, max_bytes=100, finite=True, any_leaf=False)
@example(value=[2**60], max_depth=3, max_bytes=100, finite=False, any_leaf=False)
@example(value={"a": "\ud800"}, max_depth=3, max_bytes=100, finite=False, any_leaf=False)
@example(value={"\ud800": 1}, max_depth=3, max_bytes=100, finite=False, any_leaf=False)
@example(value={1: 1}, max_depth=3, max_bytes=100, finite=False, any_leaf=False)
@example(value=[[[1]]], max_depth=2, max_bytes=100, finite=False, any_leaf=False)
@example(value=("x" * 99, None), max_depth=3, max_bytes=100, finite=False, any_leaf=False)
@example(value=[b"x"], max_depth=3, max_bytes=100, finite=False, any_leaf=False)
@example(value=[b"x"], max_depth=3, max_bytes=100, finite=False, any_leaf=True)
@given(
    value=VALUES,
    max_depth=st.integers(0, 5),
    max_bytes=st.integers(0, 200),
    finite=st.booleans(),
    any_leaf=st.booleans(),
)
def test_the_quick_walk_says_what_the_walk_with_paths_says(
    value: Any, max_depth: int, max_bytes: int, finite: bool, any_leaf: bool
) -> None:
    """`bounds_problem` decides with a walk that keeps no paths and walks again, keeping them,
    only to say where a problem is: both walks give the same verdict on any value and limits
    (the second is the whole check when the first is skipped)."""
    import rlenv.bounds as bounds

    limits = {"max_depth": max_depth, "max_bytes": max_bytes, "finite": finite}
    limits["any_leaf"] = any_leaf
    quick = bounds._bounded(value, max_depth, max_bytes, finite, any_leaf)
    originals = bounds._bounded, bounds._surely_bounded
    bounds._bounded = bounds._surely_bounded = lambda *args: False  # type: ignore[assignment]
    try:  # the path walk alone
        slow = bounds.bounds_problem(value, **limits)
    finally:
        bounds._bounded, bounds._surely_bounded = originals
    assert quick == (slow is None), slow
    assert bounds.bounds_problem(value, **limits) == slow


class _Text(str):
    pass


class _Colour(enum.Enum):
    RED = "red"


class _Level(int, enum.Enum):
    HIGH = 2


_NEAR_LIMITS = [
    2**53 - 1,
    2**53,
    -(2**53 - 1),
    -(2**53),
    10**15,
    10**16,
    99999999999999999,
    2**63,
    2**64 - 1,
    -(2**63),
]


@example(value=_NEAR_LIMITS, max_depth=3, max_bytes=10_000)
@example(value={"seed": 2**53}, max_depth=3, max_bytes=10_000)
@example(value={"seed": 9007199254740991, "n": 9007199254740992}, max_depth=3, max_bytes=10_000)
@example(value=[[1.5, 2**60]], max_depth=3, max_bytes=10_000)
@example(value={_Text("key"): 1}, max_depth=3, max_bytes=10_000)
@example(value=[_Text("value")], max_depth=3, max_bytes=10_000)
@example(value=[_Colour.RED, _Level.HIGH], max_depth=3, max_bytes=10_000)
@example(value={"id": uuid.UUID(int=7)}, max_depth=3, max_bytes=10_000)
@example(value=[orjson.Fragment(b"[1]")], max_depth=3, max_bytes=10_000)
@example(value=[dataclasses.make_dataclass("Point", ["x"])(1)], max_depth=3, max_bytes=10_000)
@example(value=[datetime.date(2025, 1, 1)], max_depth=3, max_bytes=10_000)
@example(value=[{"\ud800": 1}], max_depth=3, max_bytes=10_000)
@example(value=[[[[]]]], max_depth=3, max_bytes=10_000)
@example(value=[[[]]], max_depth=3, max_bytes=10_000)
@example(value=[1, 2, 3, 4, 5], max_depth=3, max_bytes=39)
@example(value={"a": [True, None]}, max_depth=3, max_bytes=5)
@example(value=[b"x", {1, 2}, 1j], max_depth=3, max_bytes=10_000)
@given(value=VALUES, max_depth=st.integers(0, 5), max_bytes=st.integers(0, 200))
def test_the_c_check_takes_only_what_the_walk_takes(
    value: Any, max_depth: int, max_bytes: int
) -> None:
    """`bounds._surely_bounded` (marshal and orjson, in C) says True only of values the walk
    takes: integers just past 2**53 (16 digits, like every seed), subclasses of str and int,
    enums, UUIDs, orjson fragments, dataclasses and dates (orjson writes several of these as
    JSON), lone surrogates, one level too deep, a byte too big, bytes and sets: all refused
    by the walk, so never taken by the C check (it may say False of what the walk takes)."""
    import rlenv.bounds as bounds

    if bounds._surely_bounded(value, max_depth, max_bytes):
        assert bounds._bounded(value, max_depth, max_bytes, False, False)


def test_the_c_check_takes_a_results_record() -> None:
    """The C check is the one taken for an ordinary record (else it saves nothing): a
    conversation, verifiers, floats, a 16-digit seed within range."""
    import rlenv.bounds as bounds

    record = {
        "input_id": "i0000001",
        "seed": 9007199254740991,
        "messages": [{"role": "user", "content": "echo k0000001 ünïcode"}],
        "timing": {"wall_s": 0.838638, "grader_cache": {"hits": 0, "misses": 0}},
        "verifiers": [{"name": "exact", "passed": False, "score": 0.0, "detail": None}],
    }
    assert bounds._surely_bounded(record, 128, 1 << 20)
    assert not bounds._surely_bounded({**record, "seed": 2**53}, 128, 1 << 20)
    walked: list[Any] = []
    original = bounds._bounded
    bounds._bounded = lambda value, *limits: walked.append(value) or original(value, *limits)  # type: ignore[assignment]
    try:
        assert bounds.bounds_problem(record, max_depth=128) is None
        assert walked == [], "bounds_problem walked a record the C check takes"
        assert bounds.bounds_problem({**record, "seed": 2**53}) is not None
    finally:
        bounds._bounded = original
