"""The orjson fast path of canonical JSON and of results lines writes exactly the bytes of the
reference serialisers (rfc8785, json.dumps), and raises where they raise."""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
from typing import Any

import orjson
import rfc8785
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rlenv import canonical
from rlenv.canonical import canonical_bytes, fast_json, plain_json
from rlenv.result_lines import _reference_line, decode_line, encode_line
from rlenv.results import TALLIED_FIELDS, VOLATILE_FIELDS, encode_record, outcome_digest


class Colour(enum.StrEnum):
    RED = "red"
    ASTRAL = "\U0001f600"


class Level(enum.IntEnum):
    LOW = 1


keys = st.one_of(
    st.text(max_size=6),
    st.text(alphabet=st.sampled_from("a\ue000\uffff\U00010000\U0001f600é"), max_size=4),
    st.integers(-5, 5),
    st.sampled_from([Colour.RED, None, True]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 2**53 and 2**64 too
    st.integers(-(2**53) - 2, -(2**53) + 2) | st.integers(2**53 - 2, 2**53 + 2),
    st.floats(),  # NaN, infinities, -0.0, subnormals, 1e21...
    st.floats(min_value=-1e22, max_value=1e22).map(float),
    st.sampled_from([1.0, 1e16, 1e21, 1e-7, 1e-6, 123456789.125, 5e-324, 2.0**53]),
    st.text(),  # control characters, lone surrogates, astral characters
    st.sampled_from([Colour.RED, Colour.ASTRAL, Level.LOW]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=25,
)


def _reference_digest(record: dict[Any, Any]) -> str:
    stable = {key: value for key, value in record.items() if key not in VOLATILE_FIELDS}
    return hashlib.sha256(rfc8785.dumps(canonical._clean(stable))).hexdigest()


def _outcome(function: Any, value: Any) -> tuple[str, Any]:
    try:
        return "bytes", function(value)
    except Exception as exc:
        return "raised", type(exc)


def _reference_canonical(value: Any) -> bytes:
    return rfc8785.dumps(canonical._clean(value))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_canonical_bytes_equal_rfc8785(value: Any) -> None:
    assert _outcome(canonical_bytes, value) == _outcome(_reference_canonical, value)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=6))
@example({"a": 1.5e-05})  # orjson: 0.000015, json.dumps: 1.5e-05
@example({"b": [0.0001, -9.99e-05, 123.456]})
@example({"c": 1e16, "d": 1e15})
def test_results_line_equal_json_dumps(record: dict[Any, Any]) -> None:
    assert _outcome(encode_line, record) == _outcome(_reference_line, record)


def test_what_orjson_writes_and_json_dumps_refuses_is_never_sealed() -> None:
    """The results line goes straight through orjson, which writes enums, UUIDs and dates
    that json.dumps refuses: no such record can reach it, since sealing (canonical JSON)
    refuses them first."""
    import datetime
    import uuid

    class Plain(enum.Enum):
        ONE = 1

    for odd in (Plain.ONE, uuid.UUID(int=7), datetime.date(2025, 1, 1)):
        assert _outcome(canonical_bytes, {"x": odd})[0] == "raised", odd
        assert _outcome(_reference_line, {"x": odd})[0] == "raised", odd


def test_fast_path_taken_for_ordinary_records() -> None:
    """The common record (ASCII and non-ASCII text, integral and fractional floats, a StrEnum)
    goes through orjson, not the fallback: the speed-up is real, and still byte-identical."""
    record = {
        "status": Colour.RED,
        "messages": [{"role": "user", "content": "héllo\n\x01 \u2028"}],
        "reward": 0.1 + 0.2,
        "score": 1.0,
        "big": 1e21,
        "tiny": 1e-7,
        "usage": {"completion_tokens": 3},
        "world": {"é": 1, "e": 2},
        "nan": float("nan"),
        "pair": (1, 2),
    }
    assert fast_json(record, canonical=True) == rfc8785.dumps(plain_json(record))
    assert fast_json(record, canonical=False) == _reference_line(record)
    assert json.loads(fast_json(record, canonical=False))["nan"] is None


def test_ordinary_results_lines_go_straight_through_orjson() -> None:
    """A sealed record of plain data (hex digests hold "3e" and "0e": not numbers) is written
    by orjson directly, and still as json.dumps writes it."""
    import orjson

    from rlenv import result_lines as results

    record = {
        "digest": "9dfbed4d7d6614670fc62bfe32266b654a2aa44c3900e54adb44ed26c25e4474",
        "messages": [{"role": "user", "content": "héllo 3e5 0.00001"}],
        "reward": 0.30000000000000004,
        "score": 1.0,
        "timing": {"wall_s": 0.000123, "grader_cache": {"hits": 0}},
        "seed": 1458034300877195,
        "passed": True,
        "error": None,
    }
    line = orjson.dumps(record, option=results._LINE_OPTIONS)
    assert results._NOT_REPR.search(line) is None
    assert encode_line(record) == line == _reference_line(record)
    # a tiny float costs its own field the checked path, not the whole line
    record["timing"]["wall_s"] = 7e-06
    assert results._NOT_REPR.search(orjson.dumps(7e-06)) is not None
    assert encode_line(record) == _reference_line(record)
    assert b'"wall_s":7e-06' in encode_line(record)


def test_fast_path_refuses_what_it_cannot_prove() -> None:
    """Integers beyond 2**53 (RFC 8785 refuses them), keys whose UTF-16 order differs from
    their code point order, and types that are not JSON go to the reference serialiser."""
    for value in (
        {"n": 2**53},
        {"\U00010000": 1, "\uffff": 2},
        {"x": {1, 2}},
        {"x": Level.LOW},
    ):
        try:
            fast_json(value, canonical=True)
        except Exception:
            continue
        raise AssertionError(f"fast path took {value!r}")
    assert canonical_bytes({"\U00010000": 1, "\uffff": 2}) == rfc8785.dumps(
        {"\U00010000": 1, "\uffff": 2}
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=6), values, max_size=6))
@example({"n": 2**64 + 1, "m": -(2**63) - 1})  # orjson reads these as floats: the slow path
@example({"n": 2**63 - 1, "f": 1e300, "g": 5e-324})
def test_results_line_decodes_as_json_loads_does(record: dict[str, Any]) -> None:
    """A results line read back through orjson is the value json.loads gives (types and key
    order included: repr tells 1 from 1.0 and True from 1)."""
    from rlenv.results import decode_line

    try:
        line = _reference_line(record)
    except Exception:
        return
    assert repr(decode_line(line)) == repr(json.loads(line))
    assert repr(decode_line(line.decode())) == repr(json.loads(line.decode()))


def _parsed(function: Any, line: str) -> tuple[str, str]:
    try:
        return "value", repr(function(line))
    except ValueError as exc:
        return "refused", str(exc)


JSON_TEXT = st.one_of(
    values.map(lambda value: json.dumps(value, default=str, allow_nan=True)).filter(
        lambda text: isinstance(text, str)
    ),
    st.text(alphabet=st.sampled_from('[]{}",:0123456789.eE+-tfnrulsaNIy \\ud8'), max_size=40),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_TEXT)
@example("9007199254740993")  # past 2**53: refused
@example("[9007199254740991, -9007199254740991]")
@example("18446744073709551616")  # past 2**64: orjson reads a float
@example("[1e400]")  # infinity
@example('{"a": NaN}')
@example('"\\ud800"')  # a lone surrogate: json.loads keeps it
@example('{"a": 1, "a": 2}')
@example("\ufeff{}")
@example("[" * 63 + "]" * 63)
@example("[" * 64 + "]" * 64)
@example("[" * 65 + "]" * 65)
@example('{"k": "' + "[" * 70 + '"}')  # brackets inside a string: the checked way, same value
@example('{"id": "1234567890123456789012"}')
def test_input_lines_read_as_the_checked_reader_reads_them(line: str) -> None:
    """Input, replay and label lines take orjson's way when nothing in them needs a check;
    what they give (a value, or a refusal and its reason) is what the checked way gives."""
    from rlenv.jsonl import parse_checked_json_line, parse_json_line

    assert _parsed(parse_json_line, line) == _parsed(parse_checked_json_line, line)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='0123456789.eE-+:,[]{}"ax 9dfbe', max_size=60))
@example('{"a":1e5}')
@example("[-1.5E-7]")
@example('{"d":"9dfbed4e5","n":-0.00001}')
@example("3e5")
@example('{"a":"x:3e5"}')
def test_the_quick_scan_misses_no_number_the_regex_would_check(text: str) -> None:
    """`encode_line` skips `_NOT_REPR` when `_may_not_repr` says a line has no number that
    orjson may write unlike repr: then the regex finds none either."""
    from rlenv import result_lines as results

    line = text.encode()
    if not results._may_not_repr(line):
        assert results._NOT_REPR.search(line) is None


def test_a_long_digit_run_is_read_by_json_loads() -> None:
    """decode_line leaves a line with 19 digits in a row to json.loads: an integer past 64 bits
    stays an integer (orjson would read a float)."""
    from rlenv import result_lines as results

    for line in (b'{"n": 18446744073709551616}', b'{"n": -9999999999999999999}'):
        decoded = results.decode_line(line)
        assert decoded == json.loads(line) and type(decoded["n"]) is int


def _encoded_reference(record: dict[Any, Any]) -> tuple[bytes, bytes, str]:
    """What `rlenv run` wrote and tallied before `encode_record`: the line of the record
    sealed by the reference serialiser (its digest made from its content: `seal`, else left
    as it came where canonical JSON cannot hold it), the record decoded back from it, and the
    outcome digest of that."""
    record = {**record, "digest": record.get("digest", "")}
    with contextlib.suppress(Exception):
        record["digest"] = _reference_digest(record)
    line = encode_line(record)
    decoded = decode_line(line)
    tallied = {key: value for key, value in decoded.items() if key in TALLIED_FIELDS}
    return line, tallied, outcome_digest(decoded)


record_keys = st.one_of(
    keys,
    st.sampled_from(["answer", "messages", "verifiers", "timing", "reward", "digest", "seed"]),
)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(record_keys, values, max_size=8))
@example({"verifiers": [{"score": 1.0, "name": "v"}], "timing": {"wall_s": 3.9e-05}, "seed": 7})
@example({"messages": [{"content": "ratio:1.0,[2e5 12345678901234567"}], "answer": "a"})
@example({"world": {"\U0001f600": 1, "\uffff": 2}, "reward": 1e-07})
@example({"seed": 2**53, "answer": "x"})
@example({"extra": {"n": 9007199254740993}})
def test_encode_record_writes_and_tallies_what_the_line_holds(record: dict[Any, Any]) -> None:
    """One serialisation per record gives the line `encode_line` writes, the outcome digest of
    the record read back from it, and the fields the summary reads as read back from it."""
    reference = _outcome(_encoded_reference, record)
    try:
        written = encode_record(record)
    except Exception as exc:
        assert reference == ("raised", type(exc))
        return
    if written.outcome is None:  # left to the reader of the whole line, as before
        assert written.tallied == written.line
        assert _outcome(encode_line, record) == ("bytes", written.line)
        return
    assert reference[0] == "bytes", reference
    line, tallied, outcome = reference[1]
    assert (written.line, decode_line(written.tallied), written.outcome) == (line, tallied, outcome)


def test_ordinary_records_take_the_one_serialisation_path() -> None:
    record = {
        "answer": "v1",
        "digest": "ab" * 32,
        "input_id": "i1",
        "input_index": 1,
        "messages": [{"content": "caf\u00e9 \U0001f600", "role": "user"}],
        "seed": 2**53 - 1,
        "timing": {"wall_s": 3.9e-05},
        "verifiers": [{"name": "v", "passed": True, "score": 1.0}],
        "world": {},
    }
    written = encode_record(record)
    assert written.outcome is not None
    assert b"messages" not in written.tallied and b'"verifiers"' in written.tallied


finite_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([1.0, 1e16, 1e21, 1e-7, 1.5e-05, 0.0001, -9.99e-05, 5e-324, 2.0**53]),
        st.text(),
        st.sampled_from([Colour.RED, Level.LOW]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-3, 3)), children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(finite_values)
@example({"a": [], "b": {}, "c": [{}], "d": "1e5 0.00001"})
@example({"x": [1.5e-05, 1e16, -2e-07]})
def test_indented_json_through_orjson_is_json_dumps(value: Any) -> None:
    """summary.json and run.json are indented through orjson: the text of json.dumps."""
    reference = _outcome(lambda v: json.dumps(v, indent=2, ensure_ascii=False), value)
    assert _outcome(lambda v: canonical.indented_json(v, finite=True), value) == reference
    assert _outcome(canonical.indented_json, value) == reference


def test_a_summary_is_indented_through_orjson() -> None:
    summary = {"pass_rate": {"value": 0.5, "ci": [0.25, 0.75]}, "rows": [{"n": 1}] * 3}
    assert canonical._repr_numbers(orjson.dumps(summary, option=canonical._INDENT_OPTIONS))
