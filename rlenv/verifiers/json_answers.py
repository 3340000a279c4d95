"""`json_schema`: the answer read as strict JSON and validated with formats checked.

Python's json module accepts what JSON does not: `NaN`, `Infinity` (and `1e999`, which becomes
infinity) slip past `minimum`/`maximum`, and a key given twice keeps its last value, so a
schema sees one object while another reader sees the other. Those answers are refused. A
schema's `format` is checked (jsonschema's format checker, with the `format-nongpl` extra's
checkers installed); a format nothing here can check is refused when the verifier is built,
since it would pass anything.

The answer is the JSON text, optionally inside one Markdown code fence that is the whole answer
(```` ```json ... ``` ````); text around the JSON is not JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

from rlenv.errors import UserError
from rlenv.json_schema import schema_formats
from rlenv.verifiers.base import Grader, VerifierContext

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier

_FENCE = re.compile(r"\s*```(?:json)?[ \t]*\n(?P<body>.*?)\n?```\s*", re.DOTALL | re.IGNORECASE)


class NotStrictJson(ValueError):
    pass


def _constant(name: str) -> Any:
    raise NotStrictJson(f"{name} is not JSON")


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotStrictJson(f"{text} is not a finite number")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise NotStrictJson(f"key {key!r} appears twice")
        result[key] = value
    return result


def strict_json(text: str) -> Any:
    """The JSON value of a text; NotStrictJson or json.JSONDecodeError when it is not one."""
    fenced = _FENCE.fullmatch(text)
    body = fenced.group("body") if fenced else text
    return json.loads(
        body, parse_constant=_constant, parse_float=_number, object_pairs_hook=_object
    )


def schema_grader(config: Verifier) -> Grader:
    from rlenv.json_schema import load_jsonschema

    jsonschema = load_jsonschema()

    schema = config.schema_ or {}
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UserError(f"verifier {config.label!r}: invalid JSON schema: {exc.message}") from None
    checker = validator_class.FORMAT_CHECKER
    unchecked = sorted(set(schema_formats(schema)) - set(checker.checkers))
    if unchecked:
        raise UserError(
            f"verifier {config.label!r}: format {', '.join(map(repr, unchecked))} cannot be"
            f" checked here (checked: {', '.join(sorted(checker.checkers))}); an unchecked"
            " format would pass anything"
        )
    validator = validator_class(schema, format_checker=checker)

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        try:
            value = strict_json(context.answer or "")
        except json.JSONDecodeError as exc:
            return False, 0.0, f"answer is not JSON ({exc.msg})"
        except (NotStrictJson, ValueError) as exc:  # also an integer of over 4300 digits
            return False, 0.0, f"answer is not strict JSON ({exc})"
        except RecursionError:
            return False, 0.0, "answer is not JSON this reader takes (nested too deep)"
        errors = sorted(validator.iter_errors(value), key=lambda error: list(error.path))
        if errors:
            return False, 0.0, errors[0].message[:200]
        return True, 1.0, None

    return grade
