"""What every verifier sees and returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.results import VerifierRecord
from rlenv.verifiers.numbers import Rule, Unreadable, read_gold

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier


@dataclass
class VerifierContext:
    """What a verifier may look at: the answer, the whole trajectory, the input, the workdir."""

    answer: str | None
    messages: list[dict[str, Any]]
    input: dict[str, Any]
    workdir: Path
    seed: int
    frozen_time: str | None = None
    snapshot: Path | None = None  # the pristine snapshot (state verifiers diff against it)
    snapshot_hashes: dict[str, str] = field(default_factory=dict)  # its files when work began


@dataclass
class VerifierResult:
    name: str
    type: str
    passed: bool | None  # None: not graded (a live judgment still to be made)
    score: float | None
    detail: str | None = None
    traceback: list[str] | None = None  # the env's frames when the verifier itself raised
    state: dict[str, Any] | None = None  # a state verifier's diff (sqlite_state, json_state)

    def as_dict(self) -> VerifierRecord:
        result: VerifierRecord = {
            "name": self.name,
            "type": self.type,
            "passed": self.passed,
            "score": self.score,
            "detail": self.detail,
        }
        if self.traceback:  # only on a verifier error: other results stay as they were
            result["traceback"] = self.traceback
        if self.state is not None:
            result["state"] = self.state
        return result


class LiveJudgment(Exception):  # noqa: N818 - a signal, not an error
    """Raised in the world when a judge's judgment must be made live, outside it."""


Grader = Callable[[VerifierContext], tuple[Any, ...]]
"""A built verifier: (passed, score, detail) for one rollout, and a state verifier's diff
as a fourth element."""


def expected_value(config: Verifier, context: VerifierContext) -> Any:
    """The verifier's expected value: the input's ``expected_field``, else ``expected``.

    A missing or null gold value is an error, never the text "None" (`rlenv validate` refuses
    such an input before any rollout: `rlenv.env.check_gold`)."""
    if config.expected_field is not None:
        if config.expected_field not in context.input:
            raise KeyError(f"input has no field {config.expected_field!r}")
        value = context.input[config.expected_field]
        if value is None or (isinstance(value, list) and None in value):
            raise ValueError(f"input field {config.expected_field!r} is null")
        return value
    return config.expected


def gold_problem(config: Verifier, data: dict[str, Any]) -> str | None:
    """What is wrong with an input's gold value for this verifier (None: nothing): the
    ``expected_field`` missing or null, or, for numeric, not a number its rule can read."""
    field = config.expected_field
    if field is None:
        return None
    if field not in data:
        return f"has no field {field!r}"
    value = data[field]
    if value is None or (isinstance(value, list) and None in value):
        return f"field {field!r} is null; a null gold value would compare as the text 'None'"
    if config.type == "numeric" and config.extract != "math":
        try:
            read_gold(value, Rule.of(config))
        except Unreadable as exc:
            return f"field {field!r} is not a number this verifier reads: {exc}"
    return None
