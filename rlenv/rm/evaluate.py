"""Evaluate a reward model on preference pairs: accuracy, calibration, length bias, and
accuracy on length-controlled counterexamples built from the same pairs.

- accuracy: share of pairs where chosen scores strictly higher (ties count as wrong);
- ECE: p = sigmoid(r_chosen - r_rejected) is the model's probability that chosen wins; the
  prediction is the more likely side, its confidence max(p, 1 - p) in [0.5, 1], and ECE is the
  count-weighted |accuracy - mean confidence| over 10 equal-width confidence bins on [0.5, 1];
- length bias: Spearman (rlenv.metrics.spearman) of reward vs whitespace words over every
  distinct (prompt, answer) of the file;
- long-but-bad: the rejected answer padded with neutral sentences until it has more words than
  the chosen one; short-but-good: the chosen answer cut to its core (the pair's ``core`` field,
  else its first sentence), kept when that is shorter than the rejected answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlenv.canonical import canonical_bytes, sha256_bytes, sha256_file
from rlenv.metrics import spearman
from rlenv.rm.train import PreferencePair, answer_words, read_prefs

ECE_BINS = 10
FILLER = [
    "I have checked this carefully.",
    "Here is some additional context that may help you.",
    "Please let me know if you need anything else.",
    "This is based on the information available to me.",
]


def pad_longer(text: str, than: str) -> str:
    """``text`` followed by neutral filler sentences until it has more words than ``than``."""
    padded = text
    index = 0
    while index == 0 or answer_words(padded) <= answer_words(than):
        padded = f"{padded} {FILLER[index % len(FILLER)]}"
        index += 1
    return padded


def core_answer(pair: PreferencePair) -> str:
    """The chosen answer's core: the pair's ``core`` field, else its first sentence."""
    core = pair.extra.get("core")
    if isinstance(core, str) and core.strip():
        return core
    return re.split(r"(?<=[.!?])\s+", pair.chosen.strip(), maxsplit=1)[0]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


def calibration(deltas: Sequence[float], bins: int = ECE_BINS) -> dict[str, Any]:
    """ECE and the reliability table of sigmoid(delta) as P(chosen wins)."""
    delta = np.asarray(deltas, dtype=np.float64)
    p = _sigmoid(delta)
    confidence = np.maximum(p, 1.0 - p)
    correct = delta > 0
    edges = np.linspace(0.5, 1.0, bins + 1)
    index = np.clip(np.searchsorted(edges, confidence, side="right") - 1, 0, bins - 1)
    table: list[dict[str, Any]] = []
    ece = 0.0
    for b in range(bins):
        members = index == b
        count = int(members.sum())
        row: dict[str, Any] = {
            "lo": round(float(edges[b]), 6),
            "hi": round(float(edges[b + 1]), 6),
            "n": count,
        }
        if count:
            accuracy = float(correct[members].mean())
            mean_confidence = float(confidence[members].mean())
            ece += count / len(delta) * abs(accuracy - mean_confidence)
            row.update(accuracy=accuracy, confidence=mean_confidence)
        table.append(row)
    return {"ece": ece if len(delta) else None, "bins": table}


def _accuracy(first: Sequence[float], second: Sequence[float]) -> float | None:
    if not first:
        return None
    return float(np.mean(np.asarray(first) > np.asarray(second)))


def resolve_model(model: str | Path) -> str:
    """A directory becomes ``rm:DIR``; URIs pass through."""
    from rlenv.rm.score import is_reward_uri

    text = str(model)
    if is_reward_uri(text):
        return text
    return f"rm:{text}"


def evaluate(model: str | Path, prefs_path: str | Path) -> dict[str, Any]:
    """Score every pair (and its counterexamples) with the reward model; return the report."""
    from rlenv.rm.score import load_reward_model

    prefs_path = Path(prefs_path)
    pairs = read_prefs(prefs_path)
    scorer = load_reward_model(resolve_model(model), Path.cwd())

    prompts: list[Any] = []
    answers: list[str] = []
    slots: dict[str, int] = {}

    def slot(prompt: Any, answer: str) -> int:
        key = sha256_bytes(canonical_bytes([prompt, answer]))
        if key not in slots:
            slots[key] = len(prompts)
            prompts.append(prompt)
            answers.append(answer)
        return slots[key]

    plain = [(slot(p.prompt, p.chosen), slot(p.prompt, p.rejected)) for p in pairs]
    distinct = len(prompts)
    long_bad = [
        (slot(p.prompt, p.chosen), slot(p.prompt, pad_longer(p.rejected, p.chosen))) for p in pairs
    ]
    short_good = [
        (slot(p.prompt, core), slot(p.prompt, p.rejected))
        for p in pairs
        for core in [core_answer(p)]
        if answer_words(core) < answer_words(p.rejected)
    ]
    rewards = scorer.score_many(prompts, answers)

    def side(items: list[tuple[int, int]], which: int) -> list[float]:
        return [rewards[item[which]] for item in items]

    chosen, rejected = side(plain, 0), side(plain, 1)
    deltas = [c - r for c, r in zip(chosen, rejected, strict=True)]
    by_type: dict[str, dict[str, Any]] = {}
    for pair, delta in zip(pairs, deltas, strict=True):
        kind = pair.extra.get("type")
        if isinstance(kind, str):
            entry = by_type.setdefault(kind, {"n": 0, "correct": 0})
            entry["n"] += 1
            entry["correct"] += int(delta > 0)
    manifest = getattr(scorer, "manifest", None) or {}
    trained_keys = set(manifest.get("split", {}).get("train", {}).get("keys", []))
    report: dict[str, Any] = {
        "model": scorer.identity(),
        "prefs": {"file": str(prefs_path), "sha256": sha256_file(prefs_path), "pairs": len(pairs)},
        "accuracy": _accuracy(chosen, rejected),
        "ties": sum(1 for d in deltas if d == 0),
        "mean_margin": math.fsum(deltas) / len(deltas),
        **calibration(deltas),
        "length_bias": {
            "spearman": spearman(
                [float(answer_words(a)) for a in answers[:distinct]], rewards[:distinct]
            ),
            "n_answers": distinct,
            "head_length_weight": manifest.get("head", {}).get("length_weight"),
        },
        "counterexamples": {
            "long_but_bad": {
                "n": len(long_bad),
                "accuracy": _accuracy(side(long_bad, 0), side(long_bad, 1)),
            },
            "short_but_good": {
                "n": len(short_good),
                "accuracy": _accuracy(side(short_good, 0), side(short_good, 1)),
            },
        },
        "by_type": {
            kind: {"n": v["n"], "accuracy": v["correct"] / v["n"]}
            for kind, v in sorted(by_type.items())
        },
        "seen_in_training": sum(1 for p in pairs if p.key[:16] in trained_keys),
    }
    return report


def format_report(report: dict[str, Any]) -> str:
    """Plain-text summary of an evaluation report."""

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:+.3f}"

    counter = report["counterexamples"]
    lines = [
        f"reward model {report['model'].get('uri')} on {report['prefs']['file']}"
        f" ({report['prefs']['pairs']} pairs)",
        f"  accuracy        {pct(report['accuracy'])}  (ties {report['ties']}, count as wrong)",
        f"  ECE (10 bins)   {report['ece']:.3f}" if report["ece"] is not None else "  ECE n/a",
        f"  length bias     spearman(reward, words) {num(report['length_bias']['spearman'])}"
        f" over {report['length_bias']['n_answers']} answers",
        f"  long-but-bad    {pct(counter['long_but_bad']['accuracy'])}"
        f"  (n={counter['long_but_bad']['n']}: rejected padded longer than chosen)",
        f"  short-but-good  {pct(counter['short_but_good']['accuracy'])}"
        f"  (n={counter['short_but_good']['n']}: chosen cut to its core, shorter than rejected)",
    ]
    for kind, entry in report["by_type"].items():
        lines.append(f"  type {kind:<14} {pct(entry['accuracy'])}  (n={entry['n']})")
    if report["seen_in_training"]:
        lines.append(
            f"  warning: {report['seen_in_training']} of these pairs were in the model's training"
            " split; this is not a held-out figure"
        )
    return "\n".join(lines)
