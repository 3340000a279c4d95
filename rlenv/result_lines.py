"""Results lines: one record as one sorted-key compact JSON line (the bytes of
``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, through orjson),
read back, and written a field at a time with its canonical outcome bytes from the same
serialisation (:func:`encode_fields`). `rlenv.results` holds the record they write."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from rlenv.canonical import (
    SAFE_INTEGER,
    fast_json,
    number_mask,
    number_reaching,
    plain_json,
    sha256_bytes,
)


def encode_line(record: Mapping[str, Any]) -> bytes:
    """One results line: sorted keys, compact; its digest field carries the canonical hash.

    Every line is strict JSON: a NaN or infinity that reached the record is written as null,
    as the digest already saw it (never a bare `NaN`).
    """
    try:  # plain data straight through orjson: whole, else field by field (sorted, compact)
        line = orjson.dumps(record, option=_LINE_OPTIONS)
        if not _may_not_repr(line) or _NOT_REPR.search(line) is None:
            return line
        parts = []
        for key in sorted(record):
            if type(key) is not str:
                raise TypeError(key)
            value = orjson.dumps(record[key], option=_LINE_OPTIONS)
            if _may_not_repr(value) and _NOT_REPR.search(value) is not None:  # 7e-06
                value = fast_json(record[key], canonical=False)
            parts.append(orjson.dumps(key) + b":" + value)
        return b"{" + b",".join(parts) + b"}"
    except Exception:  # a subclass, a big integer, a key that is not a string...
        pass
    try:
        return fast_json(record, canonical=False)
    except Exception:  # what the fast path cannot prove the same: the reference below
        return _reference_line(record)


_LINE_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
_NOT_REPR = re.compile(rb"(?:^|[:,\[])-?(?:[0-9]+(?:\.[0-9]+)?[eE]|0\.0000)")
"""A number (first, or after a colon, comma or bracket: no spaces) that orjson may write
unlike `repr`: one with an exponent, or one below 1e-4 (where repr turns to exponents and
orjson does not). Such a line takes the checked path (a string holding the same characters
does too, harmlessly; a hex digest does not). The direct path is for sealed records (their digest
was computed, so they hold only what canonical JSON takes: no enum, UUID or date, which
orjson would write and json.dumps refuse)."""


_NUMBER_MASK = number_mask(":,[")
"""`bytes.translate` table for `_may_not_repr`: digits and dots to "1", e and E to "e", what
may begin a number to "s", a minus to "m", anything else to "x"."""


def _may_not_repr(line: bytes) -> bool:
    """False only when `_NOT_REPR` finds nothing in `line`: every match of it is a run of digits
    and dots that begins where a number may begin (the line's start, or after [:,[ and an
    optional minus) and ends just before an e or E, or holds "0.0000"."""
    return b"0.0000" in line or number_reaching(line.translate(_NUMBER_MASK), (b"1e",))


class WrittenLine(NamedTuple):
    """A results line as `rlenv.results.encode_record` made it: the line, and what the summary
    reads of it, taken from the same serialisation (nothing encoded twice, nothing parsed
    back)."""

    line: bytes
    tallied: bytes
    """The JSON object of the line's fields the summary reads, their bytes as in `line`; the
    whole line when `outcome` is None."""
    outcome: str | None
    """The record's outcome digest; None when it is left to the reader of `tallied` (the
    line's own record: the fast path could not prove its bytes canonical)."""


def encode_fields(
    record: dict[str, Any],
    tallied_fields: frozenset[str],
    not_outcome: frozenset[str],
    not_sealed: frozenset[str],
) -> WrittenLine:
    """:func:`encode_line` of `record` a field at a time, sealed: its own ``digest`` field
    (which it must hold) made from its canonical bytes, the SHA-256 of the canonical record
    without the fields `not_sealed` (`rlenv.results.record_digest`), and written into the line
    and the record; with the outcome digest (the same without the fields `not_outcome`, a
    superset of `not_sealed`) and the fields `tallied_fields`, all from the same bytes
    (`rlenv.results.encode_record`). Raises on what it does not take."""
    plan = _PLANS.get((names := tuple(record), not_sealed))
    if plan is None:
        plan = _plan(names, tallied_fields, not_outcome, not_sealed)
    values, members, tallied, outcome, (digest_at, stable) = plan
    dumps, options = orjson.dumps, _LINE_OPTIONS
    got = values(record)
    parts = [dumps(value, option=options) for value in got]
    raw = parts.copy()  # orjson's bytes of each field (`parts` become the line's)
    canonical = parts.copy()  # each field's canonical bytes, when they are its line bytes
    for at, value in enumerate(got):
        kind = type(value)
        if kind is str or kind is bool or value is None:
            continue
        if kind is int:
            if not -SAFE_INTEGER <= value <= SAFE_INTEGER:
                canonical[at] = b""
            continue
        part = parts[at]
        mask = part.translate(_CANONICAL_MASK)
        if (b"1." in mask or b"1e" in mask or b"1E" in mask) and _has_float(mask):
            if _may_not_repr(part) and _NOT_REPR.search(part) is not None:
                parts[at] = fast_json(value, canonical=False)
            canonical[at] = b""
        elif b"u" in mask or b"1111111111111111" in mask:
            canonical[at] = b""
    fields = {
        at: members[at] + (canonical[at] or _canonical_field(raw[at], got[at])) for at in stable
    }
    own = sha256_bytes(b"{" + b",".join([fields[at] for at in stable]) + b"}")
    record["digest"] = own  # the record's own digest, written into it
    parts[digest_at] = b'"' + own.encode() + b'"'
    entries = [member + part for member, part in zip(members, parts, strict=True)]
    line = b"{" + b",".join(entries) + b"}"
    digest = sha256_bytes(b"{" + b",".join([fields[at] for at in outcome]) + b"}")
    return WrittenLine(line, b"{" + b",".join([entries[at] for at in tallied]) + b"}", digest)


def _canonical_field(written: bytes, value: Any) -> bytes:
    """The canonical bytes of a field orjson wrote as `written`: what they decode to decides
    them (a float is written once way by orjson), so fields written alike (a verifier's same
    verdict, rollout after rollout) are serialised once. A few small ones are kept."""
    found = _CANONICAL_FIELDS.get(written)
    if found is None:
        found = fast_json(value, canonical=True)
        if len(written) <= 512:
            if len(_CANONICAL_FIELDS) >= 256:
                _CANONICAL_FIELDS.clear()
            _CANONICAL_FIELDS[written] = found
    return found


_CANONICAL_FIELDS: dict[bytes, bytes] = {}

_PLANS: dict[tuple[tuple[Any, ...], frozenset[str]], Any] = {}
"""By a record's keys in their order (and what its digest leaves out): how to encode it (a
run's records share a few; one caller, with the same field sets every time)."""


def _plan(
    names: tuple[Any, ...],
    tallied_fields: frozenset[str],
    not_outcome: frozenset[str],
    not_sealed: frozenset[str],
) -> Any:
    """(the record's values in sorted-key order, each key's '"key":', the places of the
    tallied fields, those of the outcome's, (the place of its digest, those of what its
    digest covers)); TypeError for keys that are not all strings, ValueError where RFC 8785's
    key order (UTF-16) may differ from the line's or the record has no digest field."""
    if any(type(name) is not str for name in names):
        raise TypeError("keys that are not strings")
    if not all(name.isascii() for name in names):
        raise ValueError("non-ASCII keys")
    keys = sorted(names)
    getter = operator.itemgetter(*keys)
    plan = (
        getter if len(keys) > 1 else lambda record: (getter(record),),
        [orjson.dumps(key) + b":" for key in keys],
        [at for at, key in enumerate(keys) if key in tallied_fields],
        [at for at, key in enumerate(keys) if key not in not_outcome],
        (keys.index("digest"), [at for at, key in enumerate(keys) if key not in not_sealed]),
    )
    if len(_PLANS) < 64:
        _PLANS[(names, not_sealed)] = plan
    return plan


_CANONICAL_MASK = bytes(
    ord("1")
    if 0x30 <= byte <= 0x39
    else byte
    if chr(byte) in ".eE"
    else ord("s")
    if chr(byte) in ":,["
    else ord("m")
    if chr(byte) == "-"
    else ord("u")
    if byte >= 0xF0
    else ord("x")
    for byte in range(256)
)
"""`bytes.translate` table for `_has_float`: digits to "1", dots and e/E kept, what may begin a
number to "s", a minus to "m", the first byte of a character past U+FFFF to "u", anything
else to "x"."""


def _has_float(mask: bytes) -> bool:
    """Whether JSON bytes translated by `_CANONICAL_MASK` may hold a float: a run of digits
    that begins where a number may begin (the start, or after [:,[ and an optional minus) and
    is followed by a dot or an exponent. Text that only looks so inside a string says yes too
    (harmless: the field is serialised canonically)."""
    return number_reaching(mask, (b"1.", b"1e", b"1E"))


def decode_line(line: bytes | str) -> Any:
    """One results line parsed: orjson, or json.loads for what orjson refuses (then json.loads
    raises what it always raised) and for a line with 19 digits in a row (orjson would read an
    integer past 64 bits as a float; tests/test_canonical_fast.py found it)."""
    long_run = (
        b"1" * 19 in line.translate(_DIGIT_MASK)  # not a regex: one took 60 us a line
        if isinstance(line, bytes)
        else _LONG_DIGITS_TEXT.search(line) is not None
    )
    if not long_run:  # orjson reads an integer past 64 bits as a float
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(line)
    except RecursionError:  # as a line that is not JSON: callers say which line
        raise ValueError("nested too deeply") from None


_DIGIT_MASK = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x2E for byte in range(256))
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}")


def _reference_line(record: Mapping[str, Any]) -> bytes:
    """`encode_line` as json.dumps writes it (the reference of the orjson fast path)."""
    return json.dumps(
        plain_json(record),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode()
