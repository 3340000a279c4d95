"""Reading user JSONL files (inputs, replays, preferences, human labels) with one-line
file:line errors."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from rlenv.canonical import MAX_DEPTH, SAFE_INTEGER, json_problem, written_double
from rlenv.errors import UserError
from rlenv.results import HumanLabels


def json_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a JSONL file, split on newlines only: U+2028, U+0085 and the
    other characters `str.splitlines` breaks on are valid inside a JSON string."""
    text = path.read_bytes().decode("utf-8")  # no newline translation: a bare \r splits nothing
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.removesuffix("\r")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def parse_json_line(line: str, *, own_file: bool = False) -> Any:
    """One strict JSON value, or ValueError with a short reason: no NaN/Infinity literals,
    no integer past 2**53 or nesting past MAX_DEPTH (canonical JSON could not hold them).

    With `own_file` (a file rlenv wrote from canonical JSON: run.json, summary.json), an
    integer literal past 2**53 that is exactly how RFC 8785 writes a double (1e20 as
    100000000000000000000) is read as that double, which canonicalises to the same bytes
    again; any other is refused as in a user's file, where such a literal is an integer.

    A line orjson reads, with no 16 digits in a row (no integer that could pass 2**53, which
    orjson would also read as a float past 64 bits) and fewer brackets than MAX_DEPTH, holds
    nothing the checks refuse (orjson refuses NaN, Infinity and numbers that overflow): it is
    taken as orjson reads it, five times faster; anything else goes the checked way, which
    says what is wrong (`tests/test_canonical_fast.py` compares the two)."""
    if _SIXTEEN_DIGITS.search(line) is None and line.count("[") + line.count("{") < MAX_DEPTH:
        try:
            return orjson.loads(line)
        except ValueError:  # orjson.JSONDecodeError (a lone surrogate too): the checked way
            pass
    return parse_checked_json_line(line, own_file=own_file)


_SIXTEEN_DIGITS = re.compile(r"[0-9]{16}")


def parse_checked_json_line(line: str, *, own_file: bool = False) -> Any:
    """`parse_json_line` by json.loads and a walk of the value (`json_problem`)."""
    try:
        value = json.loads(
            line,
            parse_constant=_refuse_constant,
            # only a run of 16 digits can be an integer past 2**53
            parse_int=_written_number if own_file and _SIXTEEN_DIGITS.search(line) else None,
        )
    except json.JSONDecodeError as exc:
        raise ValueError(exc.msg) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # an integer with more digits than int() converts, a constant
        raise ValueError(str(exc).split(";")[0]) from None
    found = json_problem(value)
    if found is not None:
        loc, problem = found
        field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
        raise ValueError(f"{field.lstrip('.')}: {problem}" if field else problem)
    return value


def _written_number(literal: str) -> int | float:
    """An integer literal of a file rlenv wrote: the integer, or past 2**53 the double RFC
    8785 writes so (`written_double`); what is neither stays an integer, refused later."""
    if len(literal) < 16:  # fewer digits than 2**53 has
        return int(literal)
    number = int(literal)
    if -SAFE_INTEGER <= number <= SAFE_INTEGER:
        return number
    found = written_double(literal)
    return number if found is None else found


def read_objects(
    path: Path, *, what: str, error: type[UserError] = UserError, own_file: bool = False
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ("file:line", object) for every non-blank line; raise `error` on anything else.
    `own_file`: lines rlenv wrote as canonical JSON (`parse_json_line`)."""
    try:
        lines = list(json_lines(path))
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text", where=str(path)) from None
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror}", where=str(path)) from None
    for number, line in lines:
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = parse_json_line(line, own_file=own_file)
        except ValueError as exc:
            hint = " (lines split by a bare carriage return? JSONL ends lines in \\n)"
            raise error(
                f"invalid JSON: {exc}{hint if chr(13) in line else ''}", where=where
            ) from None
        if not isinstance(data, dict):
            raise error("expected a JSON object per line", where=where)
        yield where, data


class HumanLabelError(UserError, ValueError):
    """A malformed human-label line: a one-line user error naming file:line (and a ValueError,
    as the label reader has always raised)."""


def load_human(path: str | Path) -> HumanLabels:
    """Human labels from JSONL: score lines ``{"input_id", "rollout", "score"}`` and preference
    lines ``{"input_id", "a", "b", "preferred"}``. Several scores for one rollout (several
    annotators) are averaged. A malformed line raises HumanLabelError naming its file:line."""
    collected: dict[tuple[str, int], list[float]] = {}
    preferences: list[dict[str, Any]] = []
    for where, item in read_objects(Path(path), what="human labels", error=HumanLabelError):
        try:
            if "preferred" in item:
                preferences.append(_preference(item))
                continue
            score = float(item["score"])
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"score {score} is outside [0, 1]")
            key = (str(item["input_id"]), int(item["rollout"]))
            collected.setdefault(key, []).append(score)
        except (ValueError, KeyError, TypeError) as exc:
            raise HumanLabelError(f"bad human label: {exc}", where=where) from exc
    scores = {key: math.fsum(v) / len(v) for key, v in sorted(collected.items())}
    return HumanLabels(scores=scores, preferences=preferences)


def _preference(item: dict[str, Any]) -> dict[str, Any]:
    if item["preferred"] not in ("a", "b"):
        raise ValueError("'preferred' must be 'a' or 'b'")
    return {
        "input_id": str(item["input_id"]),
        "a": int(item["a"]),
        "b": int(item["b"]),
        "preferred": item["preferred"],
    }
