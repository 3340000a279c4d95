"""Held-out guarantee: do the env's held-out inputs appear in anything the models trained on?

Three comparisons, each by exact hash and by near-duplicate:

- held-out inputs vs the held-out reward model's training pairs (prompt, chosen, rejected);
- held-out inputs vs the policy's training prompts (when given);
- the held-out reward model's training pairs vs the training reward model's pairs (when given):
  the held-out RM must be trained on preferences the training RM never saw.

Texts are normalised to lowercase alphanumeric word tokens. Exact: equal sha256 of the
normalised text. Near-duplicate: word 5-gram sets (n = the shorter text's length when it has
fewer than 5 words) with Jaccard >= 0.5, or containment |A & B| / |A| >= 0.8 of the held-out
(left) item's n-grams in the other text. Candidates come from an inverted n-gram index, so the
check stays fast on large training sets.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NGRAM = 5
JACCARD = 0.5
CONTAINMENT = 0.8
METHOD = (
    f"exact: sha256 of lowercase word tokens; near: word {NGRAM}-gram Jaccard >= {JACCARD}"
    f" or containment (share of the held-out item's n-grams found in the other text) >="
    f" {CONTAINMENT}; n = the shorter text's word count below {NGRAM} words"
)
_TOKEN = re.compile(r"[a-z0-9]+")

Item = tuple[str, str, str]  # (id, field, text)


def tokens(text: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(text.lower()))


def _hash(words: tuple[str, ...]) -> str:
    return hashlib.sha256(" ".join(words).encode()).hexdigest()


def _grams(words: tuple[str, ...], n: int) -> set[tuple[str, ...]]:
    return {words[i : i + n] for i in range(len(words) - n + 1)}


def _text_of(value: Any) -> str:
    """A prompt as text: a string, or the contents of a message list joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            str(m.get("content") or "") for m in value if isinstance(m, dict) and m.get("role") != "system"
        )
    return ""


def _record_items(records: Iterable[Any], fields: Sequence[str], prefix: str) -> list[Item]:
    """(id, field, text) for each text field of each record (dicts, pairs or plain strings)."""
    items: list[Item] = []
    for index, record in enumerate(records):
        if isinstance(record, str):
            items.append((f"{prefix}{index}", "text", record))
            continue
        data = record if isinstance(record, dict) else vars(record)
        record_id = str(data.get("id") or f"{prefix}{index}")
        for name in fields:
            if name == "prompt" and "prompt" not in data and "messages" in data:
                items.append((record_id, "messages", _text_of(data["messages"])))
            elif name in data and data[name] is not None:
                items.append((record_id, name, _text_of(data[name])))
    return [item for item in items if tokens(item[2])]


@dataclass
class Overlap:
    left_id: str
    left_field: str
    right_id: str
    right_field: str
    kind: str  # "exact" | "near"
    jaccard: float
    containment: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "left_id": self.left_id,
            "left_field": self.left_field,
            "right_id": self.right_id,
            "right_field": self.right_field,
            "kind": self.kind,
            "jaccard": round(self.jaccard, 4),
            "containment": round(self.containment, 4),
        }


@dataclass
class Check:
    name: str
    left: str
    right: str
    n_left: int
    n_right: int
    overlaps: list[Overlap] = field(default_factory=list)

    @property
    def left_ids(self) -> list[str]:
        return sorted({o.left_id for o in self.overlaps})

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "left": self.left,
            "right": self.right,
            "n_left": self.n_left,
            "n_right": self.n_right,
            "exact": sum(1 for o in self.overlaps if o.kind == "exact"),
            "near": sum(1 for o in self.overlaps if o.kind == "near"),
            "overlapping_ids": self.left_ids,
            "overlaps": [o.as_dict() for o in self.overlaps],
        }


@dataclass
class LeakageReport:
    checks: list[Check]
    method: str = METHOD

    @property
    def ok(self) -> bool:
        return not any(check.overlaps for check in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "method": self.method,
            "checks": [check.as_dict() for check in self.checks],
        }

    def summary(self) -> str:
        """One line per check, naming up to five overlapping ids."""
        lines = []
        for check in self.checks:
            ids = check.left_ids
            if not ids:
                lines.append(f"{check.name}: no overlap ({check.n_left} x {check.n_right} texts)")
                continue
            shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
            exact = sum(1 for o in check.overlaps if o.kind == "exact")
            lines.append(
                f"{check.name}: {len(ids)} {check.left} overlap {check.right}"
                f" ({exact} exact, {len(check.overlaps) - exact} near): {shown}"
            )
        return "\n".join(lines)


def compare(name: str, left: list[Item], right: list[Item], labels: tuple[str, str]) -> Check:
    """Every (left item, right item) overlap, exact or near, sorted by ids."""
    check = Check(name, labels[0], labels[1], len(left), len(right))
    right_tokens = [tokens(text) for _, _, text in right]
    exact_index: dict[str, list[int]] = {}
    for index, words in enumerate(right_tokens):
        exact_index.setdefault(_hash(words), []).append(index)
    indexes: dict[int, dict[tuple[str, ...], list[int]]] = {}

    def index_for(n: int) -> dict[tuple[str, ...], list[int]]:
        if n not in indexes:
            built: dict[tuple[str, ...], list[int]] = {}
            for position, words in enumerate(right_tokens):
                for gram in _grams(words, n):
                    built.setdefault(gram, []).append(position)
            indexes[n] = built
        return indexes[n]

    found: dict[tuple[int, int], Overlap] = {}
    for left_index, (left_id, left_field, text) in enumerate(left):
        words = tokens(text)
        for position in exact_index.get(_hash(words), []):
            right_id, right_field, _ = right[position]
            found[(left_index, position)] = Overlap(
                left_id, left_field, right_id, right_field, "exact", 1.0, 1.0
            )
        n = min(NGRAM, len(words))
        candidates = sorted({p for gram in _grams(words, n) for p in index_for(n).get(gram, [])})
        for position in candidates:
            if (left_index, position) in found:
                continue
            other = right_tokens[position]
            size = min(n, len(other))
            mine, theirs = _grams(words, size), _grams(other, size)
            shared = len(mine & theirs)
            jaccard = shared / len(mine | theirs)
            containment = shared / len(mine)
            if jaccard >= JACCARD or containment >= CONTAINMENT:
                right_id, right_field, _ = right[position]
                found[(left_index, position)] = Overlap(
                    left_id, left_field, right_id, right_field, "near", jaccard, containment
                )
    check.overlaps = sorted(
        found.values(), key=lambda o: (o.left_id, o.left_field, o.right_id, o.right_field)
    )
    return check


def check_leakage(
    heldout_inputs: Sequence[Any],
    rm_train_pairs: Sequence[Any],
    training_prompts: Sequence[Any] | None = None,
    training_pairs: Sequence[Any] | None = None,
) -> LeakageReport:
    """Compare held-out inputs with the held-out RM's training pairs (and, when given, the
    policy's training prompts); compare the RM's pairs with the training RM's pairs.

    Inputs are records with ``id`` and ``prompt`` or ``messages`` (InputRecord.data, dicts),
    pairs are dicts or PreferencePair objects with ``prompt``/``chosen``/``rejected``, prompts
    are records or plain strings.
    """
    inputs = _record_items(heldout_inputs, ("prompt",), "input-")
    pair_fields = ("prompt", "chosen", "rejected")
    rm_items = _record_items(rm_train_pairs, pair_fields, "pair-")
    checks = [compare("inputs_vs_rm_train", inputs, rm_items, ("held-out inputs", "RM training pairs"))]
    if training_prompts is not None:
        prompts = _record_items(training_prompts, ("prompt",), "prompt-")
        checks.append(
            compare("inputs_vs_training_prompts", inputs, prompts, ("held-out inputs", "training prompts"))
        )
    if training_pairs is not None:
        policy_rm = _record_items(training_pairs, pair_fields, "train-pair-")
        checks.append(
            compare(
                "rm_train_vs_training_rm_pairs",
                rm_items,
                policy_rm,
                ("RM training pairs", "training-RM pairs"),
            )
        )
    return LeakageReport(checks)


def read_records(path: str | Path) -> list[Any]:
    """A JSONL file of records (or JSON strings), for the spec's training_prompts/pairs files."""
    import json

    from rlenv.errors import UserError

    path = Path(path)
    if not path.is_file():
        raise UserError("file not found", where=str(path))
    records: list[Any] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UserError(f"invalid JSON: {exc.msg}", where=f"{path}:{number}") from None
    return records
