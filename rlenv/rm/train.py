"""Train the held-out reward model: a linear Bradley-Terry head on frozen sentence embeddings.

reward(prompt, answer) = w . [embed("Question: {prompt}\\nAnswer: {answer}"), z(log1p(words))]

The embedding is all-MiniLM-L6-v2 (frozen, unit norm); the optional last feature is the answer's
standardised log word count, kept apart so that the head's length weight is visible and can be
audited (``rlenv rm eval`` reports the length bias it produces). Nothing else is hand-built: no
features tuned against the probes. The loss is Bradley-Terry with an optional per-pair margin,
-log sigmoid(r_chosen - r_rejected - margin), plus L2, minimised by full-batch Nesterov gradient
descent in numpy with a fixed step (1 / Lipschitz bound), from a seeded initialisation.

Same data + seed + options -> byte-identical ``head.npz`` and ``manifest.json``: the split is a
seeded hash order, the embeddings are computed in an order fixed by text hashes, the npz is
written with fixed zip timestamps and the manifest has no wall times or host paths.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlenv.canonical import canonical_bytes, sha256_bytes, sha256_file
from rlenv.errors import UserError
from rlenv.jsonl import read_objects

FORMAT = "rlenv-rm/1"
TEXT_TEMPLATE = "Question: {prompt}\nAnswer: {answer}"
DEFAULT_EPOCHS = 500
DEFAULT_L2 = 3e-4  # picked by internal-holdout log loss on the bundled train file
DEFAULT_HOLDOUT = 0.2
DEFAULT_SEED = 0
HEAD_FILE = "head.npz"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class PreferencePair:
    """One preference: for ``prompt``, ``chosen`` is better than ``rejected`` (by ``margin``)."""

    id: str
    prompt: str | list[dict[str, Any]]
    chosen: str
    rejected: str
    margin: float = 0.0
    line: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        """Content hash of (prompt, chosen, rejected): the pair's identity across files."""
        return sha256_bytes(
            canonical_bytes(
                {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}
            )
        )


@dataclass
class TrainResult:
    out: Path
    manifest: dict[str, Any]
    seconds: float = 0.0


def prompt_text(prompt: str | Sequence[dict[str, Any]]) -> str:
    """The text the reward model reads for a prompt: the string, or the user messages joined.

    System messages are left out: they are the env's instructions, the same for every input,
    and preference data usually has none.
    """
    if isinstance(prompt, str):
        return prompt
    parts: list[str] = []
    for message in prompt:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def answer_words(answer: str) -> int:
    return len(answer.split())


def model_text(prompt: str | Sequence[dict[str, Any]], answer: str) -> str:
    return TEXT_TEMPLATE.format(prompt=prompt_text(prompt), answer=answer)


def _bad(where: str, message: str) -> UserError:
    return UserError(message, where=where)


def read_prefs(path: str | Path) -> list[PreferencePair]:
    """Parse a preference JSONL file; every problem is a UserError naming file:line."""
    path = Path(path)
    if not path.is_file():
        raise UserError("preference file not found", where=str(path))
    pairs: list[PreferencePair] = []
    seen: dict[str, int] = {}
    for where, data in read_objects(path, what="preference file"):
        number = int(where.rsplit(":", 1)[1])
        prompt = data.get("prompt")
        if not (
            isinstance(prompt, str)
            or (
                isinstance(prompt, list)
                and all(isinstance(m, dict) and "role" in m for m in prompt)
            )
        ):
            raise _bad(where, "'prompt' must be a string or a list of {role, content} messages")
        for name in ("chosen", "rejected"):
            if not isinstance(data.get(name), str):
                raise _bad(where, f"'{name}' must be a string")
        if data["chosen"] == data["rejected"]:
            raise _bad(where, "'chosen' and 'rejected' are identical")
        margin = data.get("margin", 0.0)
        if (
            isinstance(margin, bool)
            or not isinstance(margin, int | float)
            or not math.isfinite(margin)
        ):
            raise _bad(where, "'margin' must be a finite number")
        pair = PreferencePair(
            id="",
            prompt=prompt,
            chosen=data["chosen"],
            rejected=data["rejected"],
            margin=float(margin),
            line=number,
            extra={
                k: v
                for k, v in data.items()
                if k not in ("id", "prompt", "chosen", "rejected", "margin")
            },
        )
        raw_id = data.get("id")
        if raw_id is None:
            pair_id = "sha:" + pair.key[:16]
        elif isinstance(raw_id, str | int) and not isinstance(raw_id, bool) and str(raw_id):
            pair_id = str(raw_id)
        else:
            raise _bad(where, "'id' must be a non-empty string or integer")
        if pair_id in seen:
            raise _bad(where, f"duplicate pair id {pair_id!r} (first on line {seen[pair_id]})")
        seen[pair_id] = number
        pairs.append(
            PreferencePair(
                pair_id, prompt, pair.chosen, pair.rejected, pair.margin, number, pair.extra
            )
        )
    if not pairs:
        raise UserError("preference file has no pairs", where=str(path))
    return pairs


# ----------------------------------------------------------------------------- features


def feature_spec(length_feature: bool) -> dict[str, Any]:
    return {
        "text": TEXT_TEMPLATE,
        "prompt": "string prompt, or the user messages' contents joined by newlines",
        "embedding": "unit-norm sentence embedding (384)",
        "length": "standardised log1p(whitespace words of the answer)" if length_feature else None,
        "dimension": 385 if length_feature else 384,
    }


def features(
    prompts: Sequence[str | Sequence[dict[str, Any]]],
    answers: Sequence[str],
    *,
    length_feature: bool,
    length_mean: float = 0.0,
    length_std: float = 1.0,
) -> np.ndarray:
    """Feature rows for (prompt, answer) pairs: embedding, then the length feature if used."""
    from rlenv.rm.embed import embed

    matrix = embed([model_text(p, a) for p, a in zip(prompts, answers, strict=True)])
    if not length_feature:
        return matrix
    logs = np.log1p(np.asarray([answer_words(a) for a in answers], dtype=np.float64))
    return np.hstack([matrix, ((logs - length_mean) / length_std)[:, None]])


# ----------------------------------------------------------------------------- split + fit


def split_pairs(
    pairs: Sequence[PreferencePair], holdout: float, seed: int
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, holdout): whole prompts go to the holdout, in a seeded hash order, until it holds
    ``holdout`` of the pairs; a prompt never has pairs on both sides."""
    if not 0.0 <= holdout < 1.0:
        raise UserError(f"--holdout must be in [0, 1), got {holdout}")
    by_prompt: dict[str, list[PreferencePair]] = {}
    for pair in pairs:
        by_prompt.setdefault(sha256_bytes(canonical_bytes(pair.prompt)), []).append(pair)
    order = sorted(by_prompt, key=lambda key: sha256_bytes(f"{seed}\x00{key}".encode()))
    target = round(holdout * len(pairs))
    held: set[str] = set()
    count = 0
    for key in order:
        if count >= target:
            break
        held.add(key)
        count += len(by_prompt[key])
    train = [p for p in pairs if sha256_bytes(canonical_bytes(p.prompt)) not in held]
    test = [p for p in pairs if sha256_bytes(canonical_bytes(p.prompt)) in held]
    if not train:
        raise UserError("the holdout leaves no training pairs; lower --holdout")
    return train, test


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(_log_sigmoid(x))


def fit_bradley_terry(
    deltas: np.ndarray, margins: np.ndarray, *, l2: float, epochs: int, seed: int
) -> tuple[np.ndarray, float]:
    """Minimise mean(-log sigmoid(X w - m)) + l2/2 |w|^2 by Nesterov gradient descent.

    Returns (weights, final loss). Step size 1/L with L = |X|_2^2 / (4 n) + l2, a bound on the
    gradient's Lipschitz constant, so the iteration converges without tuning.
    """
    n, d = deltas.shape
    rng = np.random.default_rng(seed)
    weights = np.asarray(rng.normal(0.0, 0.01, size=d), dtype=np.float64)
    lipschitz = float(np.linalg.norm(deltas, 2)) ** 2 / (4.0 * n) + l2
    step = 1.0 / lipschitz
    previous = weights.copy()

    def gradient(w: np.ndarray) -> np.ndarray:
        coefficient = _sigmoid(-(deltas @ w - margins))
        return -(deltas.T @ coefficient) / n + l2 * w

    for epoch in range(1, epochs + 1):
        lookahead = weights + (epoch - 1) / (epoch + 2) * (weights - previous)
        previous = weights
        weights = lookahead - step * gradient(lookahead)
    loss = float(-np.mean(_log_sigmoid(deltas @ weights - margins)) + 0.5 * l2 * weights @ weights)
    return weights, loss


def pair_accuracy(chosen: np.ndarray, rejected: np.ndarray) -> float | None:
    """Share of pairs with chosen scored strictly higher (ties count as wrong)."""
    if len(chosen) == 0:
        return None
    return float(np.mean(chosen > rejected))


# ----------------------------------------------------------------------------- files


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez with fixed zip timestamps and member order, so equal arrays give equal bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(
                member, np.ascontiguousarray(arrays[name]), allow_pickle=False
            )
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    path.write_bytes(buffer.getvalue())


def _ids_block(pairs: Sequence[PreferencePair]) -> dict[str, Any]:
    ids = [pair.id for pair in pairs]
    keys = sorted(pair.key for pair in pairs)
    return {
        "n": len(ids),
        "ids": ids,
        "keys": [key[:16] for key in keys],
        "keys_sha256": sha256_bytes(canonical_bytes(keys)),
    }


def train(
    prefs_path: str | Path,
    out: str | Path,
    *,
    seed: int = DEFAULT_SEED,
    holdout: float = DEFAULT_HOLDOUT,
    epochs: int = DEFAULT_EPOCHS,
    l2: float = DEFAULT_L2,
    length_feature: bool = True,
) -> TrainResult:
    """Train on a preference file and write DIR/head.npz + DIR/manifest.json."""
    import time

    from rlenv.rm.embed import model_identity
    from rlenv.version import __version__

    started = time.perf_counter()
    if epochs < 1:
        raise UserError(f"--epochs must be at least 1, got {epochs}")
    if l2 < 0 or not math.isfinite(l2):
        raise UserError(f"--l2 must be a finite number >= 0, got {l2}")
    prefs_path = Path(prefs_path)
    pairs = read_prefs(prefs_path)
    train_pairs, holdout_pairs = split_pairs(pairs, holdout, seed)
    identity = model_identity()
    length = _length_scale(train_pairs) if length_feature else (0.0, 1.0)

    chosen, rejected = _pair_features(train_pairs, length_feature, length)
    margins = np.asarray([p.margin for p in train_pairs], dtype=np.float64)
    weights, loss = fit_bradley_terry(chosen - rejected, margins, l2=l2, epochs=epochs, seed=seed)
    metrics: dict[str, float | None] = {
        "train_accuracy": pair_accuracy(chosen @ weights, rejected @ weights),
        "holdout_accuracy": None,
        "holdout_log_loss": None,
    }
    if holdout_pairs:
        metrics.update(_holdout_metrics(holdout_pairs, weights, length_feature, length))

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError("--out exists and is not a directory", where=str(out))
    out.mkdir(parents=True, exist_ok=True)
    write_npz(
        out / HEAD_FILE,
        {
            "weights": weights.astype(np.float64),
            "length": np.asarray(length, dtype=np.float64),
        },
    )
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "rlenv_version": __version__,
        "seed": seed,
        "data": {"file": prefs_path.name, "sha256": sha256_file(prefs_path), "pairs": len(pairs)},
        "split": {
            "holdout": holdout,
            "by": "prompt (seeded sha256 order)",
            "train": _ids_block(train_pairs),
            "holdout_pairs": _ids_block(holdout_pairs),
        },
        "embedding": identity,
        "features": feature_spec(length_feature),
        "head": {
            "file": HEAD_FILE,
            "sha256": sha256_file(out / HEAD_FILE),
            "length_feature": length_feature,
            "length_weight": float(weights[-1]) if length_feature else None,
            "length_mean": length[0],
            "length_std": length[1],
        },
        "training": {
            "loss": "bradley-terry: -log sigmoid(r_chosen - r_rejected - margin) + l2/2 |w|^2",
            "optimizer": "full-batch Nesterov gradient descent, step 1/L",
            "epochs": epochs,
            "l2": l2,
            "final_loss": loss,
        },
        "metrics": metrics,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (out / MANIFEST_FILE).write_text(text, encoding="utf-8")
    return TrainResult(out, manifest, time.perf_counter() - started)


def _length_scale(pairs: Sequence[PreferencePair]) -> tuple[float, float]:
    """Mean and standard deviation of log(1 + words) over every training answer."""
    answers = [a for p in pairs for a in (p.chosen, p.rejected)]
    logs = np.log1p(np.asarray([answer_words(a) for a in answers], dtype=np.float64))
    return float(logs.mean()), float(logs.std()) or 1.0


def _pair_features(
    subset: Sequence[PreferencePair], length_feature: bool, length: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """The feature rows of the chosen and of the rejected answers of `subset`."""
    prompts = [p.prompt for p in subset]
    chosen, rejected = (
        features(
            prompts,
            answers,
            length_feature=length_feature,
            length_mean=length[0],
            length_std=length[1],
        )
        for answers in ([p.chosen for p in subset], [p.rejected for p in subset])
    )
    return chosen, rejected


def _holdout_metrics(
    pairs: Sequence[PreferencePair],
    weights: np.ndarray,
    length_feature: bool,
    length: tuple[float, float],
) -> dict[str, float | None]:
    """Pair accuracy and Bradley-Terry log loss of the trained head on the held-out pairs."""
    chosen, rejected = _pair_features(pairs, length_feature, length)
    margins = np.asarray([p.margin for p in pairs], dtype=np.float64)
    delta = (chosen - rejected) @ weights - margins
    return {
        "holdout_accuracy": pair_accuracy(chosen @ weights, rejected @ weights),
        "holdout_log_loss": float(-np.mean(_log_sigmoid(delta))),
    }
