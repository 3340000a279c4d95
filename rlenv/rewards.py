"""The reward-model stage: scores each rollout after the verifiers; both are recorded."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.providers.base import import_ref
from rlenv.spec import RewardModel


@dataclass
class RewardContext:
    prompt: list[dict[str, Any]]
    answer: str | None
    messages: list[dict[str, Any]]
    input: dict[str, Any]
    workdir: Path
    seed: int


RewardFunction = Callable[[RewardContext], float]


def build_reward_model(config: RewardModel | None) -> RewardFunction | None:
    """Resolve the spec's reward model to a callable; None when the spec has none."""
    if config is None:
        return None
    function = import_ref(config.function, what="reward_model.function")
    if not callable(function):
        raise UserError(f"reward_model.function: {config.function} is not callable")
    options = dict(config.options)

    def score(context: RewardContext) -> float:
        value = float(function(context.prompt, context.answer, context, **options))
        if not math.isfinite(value):
            raise ValueError(f"reward model returned {value}")
        return value

    return score
