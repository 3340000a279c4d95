"""The reward-model stage: scores each rollout after the verifiers; both are recorded."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.errors import UserError
from rlenv.refs import import_ref

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import CompositeReward, RewardModel


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


# ---------------------------------------------------------------------------------------------
# The composite reward (`reward: {components: ...}` in the spec).


def build_components(config: CompositeReward | None) -> dict[str, RewardFunction]:
    """The python-function components, imported now: ``fn(prompt, answer, ctx) -> float``
    (the python reward model's signature)."""
    functions: dict[str, RewardFunction] = {}
    for name, component in (config.components if config else {}).items():
        if component.function is None:
            continue
        function = import_ref(component.function, what=f"reward.components.{name}.function")
        if not callable(function):
            raise UserError(
                f"reward.components.{name}.function: {component.function} is not callable"
            )

        def score(context: RewardContext, function: Any = function) -> float:
            value = float(function(context.prompt, context.answer, context))
            if not math.isfinite(value):
                raise ValueError(f"reward component returned {value}")
            return value

        functions[name] = score
    return functions


def composite(
    config: CompositeReward,
    verifiers: Sequence[Mapping[str, Any]],
    reward_model: float | None,
    functions: dict[str, RewardFunction],
    context: RewardContext,
) -> tuple[dict[str, float | None], str | None]:
    """Every component's value and ``total`` (the weighted sum of the components that have a
    value; None when none has), and the first error a function component raised.

    A verifier component is its pass as 1.0/0.0 (``use: passed``) or its score; a verifier
    that did not run (not applicable, pending, not sampled) gives no value, nor does a reward
    model or function that failed.
    """
    by_name = {result["name"]: result for result in verifiers}
    values: dict[str, float | None] = {}
    error: str | None = None
    for name, component in config.components.items():
        value: float | None = None
        if component.verifier is not None:
            result = by_name.get(component.verifier)
            if result is not None and result.get("passed") is not None:
                raw = float(result["passed"]) if component.use == "passed" else result["score"]
                value = float(raw) if raw is not None else None
        elif component.reward_model:
            value = reward_model
        else:
            try:
                value = functions[name](context)
            except Exception as exc:
                error = error or f"reward.components.{name}: {type(exc).__name__}: {exc}"
        values[name] = value
    present = [
        (config.components[name].weight, value)
        for name, value in values.items()
        if value is not None
    ]
    values["total"] = math.fsum(w * v for w, v in present) if present else None
    return values, error
