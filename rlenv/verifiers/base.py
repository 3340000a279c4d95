"""What every verifier sees and returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass
class VerifierResult:
    name: str
    type: str
    passed: bool
    score: float
    detail: str | None = None
    traceback: list[str] | None = None  # the env's frames when the verifier itself raised

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "passed": self.passed,
            "score": self.score,
            "detail": self.detail,
        }
        if self.traceback:  # only on a verifier error: other results stay as they were
            result["traceback"] = self.traceback
        return result


Check = Callable[[VerifierContext], tuple[bool, float, str | None]]
"""A built verifier: (passed, score, detail) for one rollout."""


def expected_value(config: Verifier, context: VerifierContext) -> Any:
    """The verifier's expected value: the input's ``expected_field``, else ``expected``."""
    if config.expected_field is not None:
        if config.expected_field not in context.input:
            raise KeyError(f"input has no field {config.expected_field!r}")
        return context.input[config.expected_field]
    return config.expected
