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


def build_reward_model(
    config: RewardModel | None, root: Path | None = None
) -> RewardFunction | None:
    """Resolve the spec's reward model to a callable; None when the spec has none.

    A ``uri`` is checked now (its files must exist) but loaded on the first score, so
    validating a spec never loads an embedding model or a checkpoint.
    """
    if config is None:
        return None
    if config.uri is not None:
        from rlenv.rm.score import load_reward_model, reward_model_files

        uri = config.uri
        reward_model_files(uri, root)
        loaded: list[Any] = []

        def load() -> Any:
            if not loaded:
                loaded.append(load_reward_model(uri, root))
            return loaded[0]

        def score_uri(context: RewardContext) -> float:
            value = float(load()(context.prompt, context.answer or ""))
            if not math.isfinite(value):
                raise ValueError(f"reward model returned {value}")
            return value

        def preload() -> None:
            """Load it and score once (libraries import more on first use): a worker does this
            when it starts, before its clock is frozen; loading is not a rollout's time."""
            load()([{"role": "user", "content": "warm-up"}], "warm-up")

        score_uri.preload = preload  # type: ignore[attr-defined]
        return score_uri
    assert config.function is not None
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
