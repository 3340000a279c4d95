"""The one canonical-JSON and hashing helper: every digest and fingerprint goes through here."""

from __future__ import annotations

import hashlib
import math
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import rfc8785

SAFE_INTEGER = 2**53 - 1
"""The largest integer RFC 8785 canonical JSON holds exactly (an IEEE double's integer range)."""
MAX_DEPTH = 64
"""How deeply user JSON/YAML may nest (lists and mappings); deeper is refused, not recursed."""
MAX_VALUES = 200_000
"""How many values a user YAML document may expand to (a YAML alias bomb stops here)."""

JsonPath = tuple[str | int, ...]


def json_problem(
    value: Any,
    *,
    also: tuple[type, ...] = (),
    max_depth: int = MAX_DEPTH,
    max_values: int | None = None,
) -> tuple[JsonPath, str] | None:
    """The first place where `value` is not strict, canonicalisable JSON, and what is wrong.

    Refused: integers beyond +/-(2**53 - 1), NaN and infinities, non-string mapping keys, any
    type that is not JSON (set, bytes...; `also` admits more, e.g. dates in YAML), nesting
    deeper than `max_depth` and, with `max_values` (MAX_VALUES for YAML), more values in all
    (shared parts counted each time they appear, as a YAML alias expands them). Walked without
    recursion.
    """
    stack: list[tuple[JsonPath, Any, int]] = [((), value, 0)]
    seen = 0
    while stack:
        path, item, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            return path, f"expands to more than {max_values:,} values (YAML aliases?)"
        if item is None or isinstance(item, bool | str):
            continue
        if isinstance(item, int):
            if not -SAFE_INTEGER <= item <= SAFE_INTEGER:
                digits = len(str(abs(item))) if abs(item).bit_length() < 14_000 else "many"
                return path, (
                    f"integer with {digits} digits is outside +/-(2**53 - 1), which canonical"
                    " JSON cannot hold exactly; write it as a string"
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return path, f"{item} is not a JSON number (NaN and infinities are not JSON)"
            continue
        if isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                return path, f"nested more than {max_depth} levels deep"
            children: list[tuple[JsonPath, Any, int]] = []
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return path, f"mapping key {key!r} is a {type(key).__name__}, not a string"
                    children.append(((*path, key), child, depth + 1))
            else:
                children = [((*path, index), child, depth + 1) for index, child in enumerate(item)]
            stack.extend(reversed(children))  # popped in document order
            continue
        if also and isinstance(item, also):
            continue
        return path, f"a {type(item).__name__} is not JSON"
    return None


def written_double(literal: str) -> float | None:
    """The double an integer literal stands for when the literal is exactly how RFC 8785
    (ECMAScript's number form) writes that double, else None.

    RFC 8785 writes an integral double below 1e21 without exponent or fraction, so one beyond
    +/-(2**53 - 1) comes out as an integer literal (1e20 -> 100000000000000000000, 2**64 ->
    18446744073709552000). Only the one literal the writer makes of a double is taken; an
    integer no double is written as (9007199254740993, 18446744073709551616, 10**400) is not.
    """
    if len(literal) > 22:  # a sign and 21 digits: from 1e21 on, the form has an exponent
        return None
    number = float(literal)
    return number if _canonical_float(number) == literal.encode() else None


def _clean(value: Any) -> Any:
    """Make a value canonicalisable: tuples become lists, non-finite floats become None."""
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def plain_json(value: Any) -> Any:
    """`value` as the canonical form sees it: non-finite floats are null, tuples lists."""
    return _clean(value)


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes (sorted keys, stable number formatting).

    The common case goes through orjson (`fast_json`): byte-identical to `rfc8785.dumps`, which
    remains the reference for anything the fast path cannot prove the same (and for the error
    a value that is not JSON raises); tests/test_canonical_fast.py checks the two agree.
    """
    try:
        return fast_json(value, canonical=True)
    except Exception:  # _NotFast, or anything the reference is to raise (or not) itself
        return rfc8785.dumps(_clean(value))


class _NotFast(Exception):
    """A value the orjson fast path does not take (the reference serialiser does)."""


_ORJSON_INT = (-(2**63), 2**64 - 1)  # what orjson writes as an integer


def _canonical_float(number: float) -> bytes:
    return rfc8785.dumps(number)


def _repr_float(number: float) -> bytes:
    return float.__repr__(number).encode()


def _prepare(value: Any, canonical: bool) -> Any:
    """`_clean(value)` in a form orjson (with OPT_SORT_KEYS) writes byte for byte as the
    reference does: floats as pre-written fragments (RFC 8785's number form, or `repr` as
    `json.dumps` writes them), integers and keys only where the two agree; anything else (a
    subclass, a type that is not JSON, an integer out of range, a key whose UTF-16 order may
    differ from its code point order) raises `_NotFast`."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is dict:
        prepared = {}
        for key, item in value.items():
            if type(key) is not str:
                key = str(key)
            leaf = type(item)
            # the common leaves inline (a call per value was most of the cost)
            prepared[key] = (
                item
                if leaf is str or leaf is bool or item is None
                else _number(item, canonical)
                if leaf is int or leaf is float
                else _prepare(item, canonical)
            )
        keys = "".join(prepared)
        # RFC 8785 sorts keys by UTF-16 code units, orjson by code points: the same order
        # unless a key holds a character beyond U+FFFF
        if canonical and not keys.isascii() and max(keys) > "\uffff":
            raise _NotFast
        return prepared
    if kind is list or kind is tuple:
        return [
            item if type(item) is str or item is None else _prepare(item, canonical)
            for item in value
        ]
    if kind is int or kind is float:
        return _number(value, canonical)
    if isinstance(value, str):  # e.g. a StrEnum status: both references write its content
        return str.__str__(value)
    raise _NotFast


def _number(value: int | float, canonical: bool) -> Any:
    if not isinstance(value, float):
        low, high = (-SAFE_INTEGER, SAFE_INTEGER) if canonical else _ORJSON_INT
        if low <= value <= high:
            return value
        raise _NotFast
    if not math.isfinite(value):
        return None
    if not canonical:
        return orjson.Fragment(_repr_float(value))
    if value.is_integer() and -SAFE_INTEGER <= value <= SAFE_INTEGER:
        return int(value)  # RFC 8785 writes an integral double as the integer (1.0 -> 1)
    return orjson.Fragment(_canonical_float(value))


def fast_json(value: Any, *, canonical: bool) -> bytes:
    """Sorted-key compact JSON of `_clean(value)` through orjson: with `canonical`, the bytes
    of `rfc8785.dumps`; without, those of `json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)`. Raises (`_NotFast`, orjson's TypeError) on what it cannot prove the
    same; callers fall back to the reference serialiser then."""
    return orjson.dumps(_prepare(value, canonical), option=orjson.OPT_SORT_KEYS)


def indented_json(value: Any, *, finite: bool = False) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, the same text, in a fraction of its
    memory: with an indent, ``json.dumps`` keeps every chunk (a key, a comma, a newline) as a
    string of its own until it joins them, about five times the text (a summary.json of 10k
    inputs: 12 MB to write 2.4 MB); here chunks are joined a few thousand at a time.

    With `finite` (the caller knows `value` holds no NaN or infinity, which ``json.dumps``
    writes as ``NaN`` and orjson as ``null``: e.g. a value read back from canonical JSON), it
    goes through orjson, five times faster, unless orjson refuses it or its text holds a
    number orjson may write unlike ``repr`` (then the way above; tests/test_canonical_fast.py
    compares the two)."""
    if finite:
        try:
            text = orjson.dumps(value, option=_INDENT_OPTIONS)
        except TypeError:  # a type orjson does not write as json.dumps does, a big integer...
            pass
        else:
            if _repr_numbers(text):
                return text.decode()
    import json

    pieces: list[str] = []
    batch: list[str] = []
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(value):
        batch.append(chunk)
        if len(batch) >= 4096:
            pieces.append("".join(batch))
            batch.clear()
    pieces.append("".join(batch))
    return "".join(pieces)


_INDENT_OPTIONS = (
    orjson.OPT_INDENT_2
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def number_mask(before: str) -> bytes:
    """A `bytes.translate` table for `number_reaching`: digits and dots to "1", e and E to "e",
    the characters `before` (what may come before a number) to "s", a minus to "m", anything
    else to "x"."""
    return bytes(
        ord("1")
        if chr(byte) in "0123456789."
        else ord("e")
        if chr(byte) in "eE"
        else ord("s")
        if chr(byte) in before
        else ord("m")
        if chr(byte) == "-"
        else ord("x")
        for byte in range(256)
    )


_INDENT_MASK = number_mask(":,[ \n")
"""`bytes.translate` table for `_repr_numbers`: digits and dots to "1", e and E to "e", what
may come before a number in indented JSON (a colon, comma, bracket, space or newline) to "s", a
minus to "m", anything else to "x"."""


def _repr_numbers(text: bytes) -> bool:
    """Whether orjson's indented `text` holds no number it may write unlike ``repr``: none with
    an exponent and none below 1e-4 (where ``repr`` turns to exponents and orjson does not).
    Text inside a string that only looks so answers no too (harmless: the slow way)."""
    return b"0.0000" not in text and not number_reaching(text.translate(_INDENT_MASK), (b"1e",))


def number_reaching(mask: bytes, marks: tuple[bytes, ...]) -> bool:
    """Whether `mask` (JSON bytes put through a `bytes.translate` table that makes digits "1", a
    minus "m" and what may come before a number "s") holds one of `marks` (a "1" and what
    follows it) at the end of a run of "1" that begins where a number may begin: the start, or
    after an "s" and an optional minus. Decided with C string methods (a regex scanned every
    byte in Python's engine: 60 us a results line, more than the rest of writing it)."""
    for mark in marks:
        at = mask.find(mark)
        while at >= 0:
            start = at
            while start > 0 and mask[start - 1] == 0x31:  # "1": back to the run's first byte
                start -= 1
            if start > 0 and mask[start - 1] == 0x6D:  # "m": a minus before it
                start -= 1
            if start == 0 or mask[start - 1] == 0x73:  # "s"
                return True
            at = mask.find(mark, at + 2)
    return False


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(value: Any) -> str:
    return sha256_bytes(canonical_bytes(value))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(root: Path) -> list[tuple[str, str, str]]:
    """(relative posix path, kind, full path) of every entry below root, links not followed."""
    found: list[tuple[str, str, str]] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            full = os.path.join(current, name)
            mode = os.lstat(full).st_mode
            kind = (
                "link"
                if stat.S_ISLNK(mode)
                else "dir"
                if stat.S_ISDIR(mode)
                else "file"
                if stat.S_ISREG(mode)
                else "FIFO"
                if stat.S_ISFIFO(mode)
                else "socket"
                if stat.S_ISSOCK(mode)
                else "device file"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "special file"
            )
            found.append((Path(full).relative_to(root).as_posix(), kind, full))
    return found


def directory_manifest(root: Path) -> list[tuple[str, str]]:
    """Sorted (relative posix path, sha256) of every regular file and symlink below root.

    A symlink is hashed by its target (`symlink:` + target), never followed; FIFOs, sockets and
    devices carry no content and are left out (`unsafe_entries` names them). Sorted explicitly
    so directory listing order never leaks into a hash.
    """
    entries: list[tuple[str, str]] = []
    for name, kind, full in _entries(root):
        if kind == "file":
            entries.append((name, sha256_file(Path(full))))
        elif kind == "link":
            entries.append((name, sha256_bytes(b"symlink:" + os.fsencode(os.readlink(full)))))
    entries.sort()
    return entries


def unsafe_entries(root: Path) -> list[str]:
    """What makes a snapshot not what its hash says: symlinks leading outside it, FIFOs,
    sockets and device files (one line each, naming the entry)."""
    base = os.path.realpath(root)
    problems: list[str] = []
    for name, kind, full in sorted(_entries(root)):
        if kind == "link":
            target = os.path.realpath(full)
            if target != base and not target.startswith(base + os.sep):
                problems.append(
                    f"symlink {name} points outside the snapshot (-> {os.readlink(full)})"
                )
        elif kind not in ("file", "dir"):
            problems.append(f"{name} is a {kind}")
    return problems


def manifest_hash(root: Path) -> str:
    """sha256 of a directory's manifest: one `sha256  path` line per file, sorted by path."""
    text = "".join(f"{digest}  {name}\n" for name, digest in directory_manifest(root))
    return sha256_bytes(text.encode())
