"""`rlenv rm calibrate`: the reward model's raw score mapped onto a human absolute scale.

Human scores come as ``{"prompt", "answer", "score"}`` lines on any absolute scale (1-10,
0-100, ...). The reward model scores every (prompt, answer); a monotone map from raw score to
human score is fitted by isotonic regression (scikit-learn's ``IsotonicRegression``, out of
bounds clipped), with a bootstrap band (prompts resampled, the fit's 2.5th and 97.5th
percentiles on a grid of raw scores). Held-out error: a seeded share of whole prompts is held
out, the map fitted on the rest, and the mean absolute error on the human scale reported (with
a constant predictor's for reference); the stored map is then refitted on every line.

The map is written as ``calibration.json`` (plain knots, applied by
:func:`rlenv.metrics.calibration.apply_calibration` without scikit-learn), by default beside
the reward model, where runs pick it up (:func:`calibration_for`) and report the raw reward,
the calibrated estimate and, given human labels, the alignment gap.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlenv.canonical import sha256_file
from rlenv.errors import UserError
from rlenv.files import atomic_write

FORMAT = "rlenv-calibration/1"
CALIBRATION_FILE = "calibration.json"
BAND_POINTS = 41
RM_EXTRA = "pip install 'rlenv[rm]'"


class HumanScore:
    """One human judgement: a prompt, an answer and its score on the human scale."""

    __slots__ = ("prompt", "answer", "score")

    def __init__(self, prompt: Any, answer: str, score: float) -> None:
        self.prompt, self.answer, self.score = prompt, answer, score


def read_human_scores(path: Path) -> list[HumanScore]:
    """``{"prompt", "answer", "score"}`` lines; a bad line is a UserError naming file:line."""
    from rlenv.jsonl import read_objects

    if not path.is_file():
        raise UserError(f"human scores file not found: {path}")
    rows: list[HumanScore] = []
    for where, item in read_objects(path, what="human scores"):
        prompt, answer, score = item.get("prompt"), item.get("answer"), item.get("score")
        if not isinstance(prompt, str | list) or not prompt:
            raise UserError("'prompt' must be a non-empty string or message list", where=where)
        if not isinstance(answer, str):
            raise UserError("'answer' must be a string", where=where)
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise UserError("'score' must be a number", where=where)
        if not math.isfinite(score):
            raise UserError(f"'score' must be finite, got {score}", where=where)
        rows.append(HumanScore(prompt, answer, float(score)))
    if len(rows) < 4:
        raise UserError(
            f"need at least 4 human scores to calibrate, got {len(rows)}", where=str(path)
        )
    return rows


def _prompt_key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def _fit(raw: np.ndarray, human: np.ndarray, lo: float, hi: float) -> Any:
    from sklearn.isotonic import IsotonicRegression

    model = IsotonicRegression(y_min=lo, y_max=hi, increasing=True, out_of_bounds="clip")
    return model.fit(raw, human)


def _knots(model: Any) -> dict[str, list[float]]:
    return {
        "raw": [float(v) for v in model.X_thresholds_],
        "human": [float(v) for v in model.y_thresholds_],
    }


def _split(prompts: Sequence[str], holdout: float, seed: int) -> set[str]:
    """Held-out prompts: the first share in seeded sha256 order (whole prompts)."""
    unique = sorted(set(prompts), key=lambda p: hashlib.sha256(f"{seed}:{p}".encode()).hexdigest())
    count = round(len(unique) * holdout)
    if holdout > 0 and len(unique) >= 2:
        count = min(max(count, 1), len(unique) - 1)
    return set(unique[:count])


def fit_calibration(
    raw: Sequence[float],
    human: Sequence[float],
    prompts: Sequence[str],
    *,
    scale: tuple[float, float] | None = None,
    holdout: float = 0.2,
    seed: int = 0,
    n_boot: int = 200,
) -> dict[str, Any]:
    """Isotonic map raw -> human with its bootstrap band and held-out MAE (no I/O)."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise UserError(f"rm calibrate needs scikit-learn: {RM_EXTRA}") from None
    x, y = np.asarray(raw, dtype=float), np.asarray(human, dtype=float)
    lo, hi = scale if scale is not None else (float(y.min()), float(y.max()))
    if not lo < hi:
        raise UserError(f"the human scale is empty ({lo} to {hi}); give --scale LO,HI")
    outside = [v for v in y if v < lo or v > hi]
    if outside:
        raise UserError(f"human score {outside[0]} is outside the scale {lo} to {hi}")
    keys = list(prompts)
    held = _split(keys, holdout, seed)
    test = np.array([k in held for k in keys])
    holdout_block: dict[str, Any] = {"n": int(test.sum()), "prompts": len(held)}
    if test.any() and (~test).any():
        part = _fit(x[~test], y[~test], lo, hi)
        predicted = part.predict(x[test])
        holdout_block["mae"] = float(np.mean(np.abs(predicted - y[test])))
        holdout_block["mae_constant"] = float(np.mean(np.abs(np.mean(y[~test]) - y[test])))
        holdout_block["spearman"] = _spearman(x[test], y[test])
    else:
        holdout_block.update(mae=None, mae_constant=None, spearman=None)
    model = _fit(x, y, lo, hi)
    grid = np.linspace(float(x.min()), float(x.max()), BAND_POINTS)
    rng = np.random.default_rng(seed)
    unique = sorted(set(keys))
    members = {key: np.flatnonzero(np.array([k == key for k in keys])) for key in unique}
    curves = []
    for _ in range(n_boot):
        drawn = rng.integers(0, len(unique), size=len(unique))
        rows = np.concatenate([members[unique[i]] for i in drawn])
        curves.append(_fit(x[rows], y[rows], lo, hi).predict(grid))
    stacked = np.vstack(curves) if curves else np.vstack([model.predict(grid)])
    lower, upper = np.quantile(stacked, [0.025, 0.975], axis=0)
    return {
        "format": FORMAT,
        "method": "isotonic regression (scikit-learn IsotonicRegression, out of bounds clipped)",
        "scale": [lo, hi],
        "knots": _knots(model),
        "band": {
            "raw": [float(v) for v in grid],
            "lower": [float(v) for v in lower],
            "upper": [float(v) for v in upper],
            "n_boot": n_boot,
            "level": 0.95,
        },
        "n": len(keys),
        "prompts": len(unique),
        "seed": seed,
        "holdout": {**holdout_block, "share": holdout},
        "raw_range": [float(x.min()), float(x.max())],
    }


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    from rlenv.metrics import spearman

    return spearman(list(x), list(y))


def calibrate(
    model: str | Path,
    scores_path: str | Path,
    out: str | Path | None = None,
    *,
    scale: tuple[float, float] | None = None,
    holdout: float = 0.2,
    seed: int = 0,
    n_boot: int = 200,
) -> dict[str, Any]:
    """Score the human-scored answers with the reward model, fit the map, write
    ``calibration.json`` into ``out`` (default: the reward model's directory). Returns it,
    with ``path``."""
    from rlenv.rm.score import is_reward_uri, load_reward_model, reward_scheme

    scores_path = Path(scores_path)
    rows = read_human_scores(scores_path)
    uri = str(model) if is_reward_uri(str(model)) else f"rm:{model}"
    scorer = load_reward_model(uri, Path.cwd())
    if out is None:
        scheme, rest = reward_scheme(uri)
        if scheme.form.endswith("URL"):
            raise UserError("an http reward model has no directory: give --out DIR")
        out = Path(rest)
    raw = scorer.score_many([r.prompt for r in rows], [r.answer for r in rows])
    result = fit_calibration(
        raw,
        [r.score for r in rows],
        [_prompt_key(r.prompt) for r in rows],
        scale=scale,
        holdout=holdout,
        seed=seed,
        n_boot=n_boot,
    )
    result["reward_model"] = scorer.identity()
    result["data"] = {"file": scores_path.name, "sha256": sha256_file(scores_path)}
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    path = target / CALIBRATION_FILE
    atomic_write(path, (json.dumps(result, indent=2, sort_keys=True) + "\n").encode())
    return {**result, "path": str(path)}


def load_calibration(path: Path) -> dict[str, Any]:
    """A calibration.json, checked enough that applying it cannot fail; UserError otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"unreadable calibration: {exc}", where=str(path)) from None
    try:
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT!r}")
        lo, hi = (float(v) for v in data["scale"])
        for name, xs, ys in (
            ("knots", data["knots"]["raw"], data["knots"]["human"]),
            ("band", data["band"]["raw"], data["band"]["lower"]),
            ("band", data["band"]["raw"], data["band"]["upper"]),
        ):
            if not xs or len(xs) != len(ys):
                raise ValueError(f"{name}: raw and human lists differ in length or are empty")
            values = [float(v) for v in [*xs, *ys]]
            if not all(math.isfinite(v) for v in values):
                raise ValueError(f"{name}: not finite")
            if any(b < a for a, b in zip(xs, xs[1:], strict=False)):
                raise ValueError(f"{name}: raw scores are not increasing")
        if not lo < hi:
            raise ValueError("empty scale")
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise UserError(f"not a reward-model calibration: {exc}", where=str(path)) from None
    return {
        key: data[key]
        for key in ("format", "scale", "knots", "band", "holdout", "data")
        if key in data
    }


def calibration_for(uri: str, spec_root: Path | str | None = None) -> dict[str, Any] | None:
    """The calibration stored beside a directory reward model (rm:DIR, hf-rm:DIR), if any."""
    from rlenv.rm.score import reward_scheme

    scheme, rest = reward_scheme(uri)
    if scheme.form.endswith("URL") or not rest:
        return None
    directory = Path(rest).expanduser()
    if not directory.is_absolute() and spec_root is not None:
        directory = Path(spec_root) / directory
    path = directory / CALIBRATION_FILE
    return load_calibration(path) if path.is_file() else None
