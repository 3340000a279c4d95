"""Held-out guarantee: do the env's held-out inputs appear in anything the models trained on?

Three comparisons, each by exact hash and by near-duplicate:

- held-out inputs vs the held-out reward model's training pairs (prompt, chosen, rejected);
- held-out inputs vs the policy's training prompts (when given);
- the held-out reward model's training prompts vs the training reward model's preference
  prompts (when given): the held-out RM must be trained on preferences the training RM never
  saw. Prompts only: short answers such as "I don't know." recur in any two preference sets.

Texts are normalised to lowercase alphanumeric word tokens. Exact: equal sha256 of the
normalised text. Near-duplicate: containment >= 0.8, the share of the held-out (left) item's
word 5-grams found in the other text (n = the left text's length when it has fewer than 5
words, so a short prompt must appear whole). Containment is used rather than 5-gram Jaccard
>= 0.5 because templated prompts that differ only in their entity ("Who made the first ascent
of Mount X?" / "... of Mount Y?") reach Jaccard 0.6 but containment 0.75; with one differing
word, containment reaches 0.8 only for templates of 29 words or more. Jaccard can be switched
on as well (``jaccard=0.5``). Candidates come from an inverted n-gram index over the distinct
texts of the other side, so the check stays fast on large training sets.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NGRAM = 5
CONTAINMENT = 0.8


def describe_method(containment: float, jaccard: float | None) -> str:
    near = f"word {NGRAM}-gram containment of the held-out item in the other text >= {containment}"
    if jaccard is not None:
        near += f" or {NGRAM}-gram Jaccard >= {jaccard}"
    return (
        f"exact: sha256 of lowercase word tokens; near: {near}"
        f" (n = the held-out text's word count when below {NGRAM})"
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
            str(m.get("content") or "")
            for m in value
            if isinstance(m, dict) and m.get("role") != "system"
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
    """One held-out text overlapping one distinct text of the other side (all its records)."""

    left_id: str
    left_field: str
    right: list[str]  # "id.field" of every record holding the overlapping text
    kind: str  # "exact" | "near"
    jaccard: float
    containment: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "left_id": self.left_id,
            "left_field": self.left_field,
            "right": self.right,
            "kind": self.kind,
            "jaccard": round(self.jaccard, 4),
            "containment": round(self.containment, 4),
        }


@dataclass
class OverlapScan:
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
    checks: list[OverlapScan]
    method: str = ""

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


def compare(
    name: str,
    left: list[Item],
    right: list[Item],
    labels: tuple[str, str],
    *,
    containment: float = CONTAINMENT,
    jaccard: float | None = None,
) -> OverlapScan:
    """Every (left item, distinct right text) overlap, exact or near, sorted by left id."""
    check = OverlapScan(name, labels[0], labels[1], len(left), len(right))
    holders: dict[tuple[str, ...], list[str]] = {}
    for right_id, right_field, text in right:
        holders.setdefault(tokens(text), []).append(f"{right_id}.{right_field}")
    distinct = sorted(holders)
    exact_index = {_hash(words): position for position, words in enumerate(distinct)}
    indexes: dict[int, dict[tuple[str, ...], list[int]]] = {}

    def index_for(n: int) -> dict[tuple[str, ...], list[int]]:
        if n not in indexes:
            built: dict[tuple[str, ...], list[int]] = {}
            for position, words in enumerate(distinct):
                for gram in _grams(words, n):
                    built.setdefault(gram, []).append(position)
            indexes[n] = built
        return indexes[n]

    for left_id, left_field, text in left:
        words = tokens(text)
        exact = exact_index.get(_hash(words))
        if exact is not None:
            check.overlaps.append(
                Overlap(left_id, left_field, sorted(holders[distinct[exact]]), "exact", 1.0, 1.0)
            )
        n = min(NGRAM, len(words))
        mine = _grams(words, n)
        index = index_for(n)
        candidates = sorted({p for gram in mine for p in index.get(gram, [])} - {exact})
        for position in candidates:
            theirs = _grams(distinct[position], n)
            shared = len(mine & theirs)
            share = shared / len(mine)
            similarity = shared / len(mine | theirs)
            if share >= containment or (jaccard is not None and similarity >= jaccard):
                check.overlaps.append(
                    Overlap(
                        left_id,
                        left_field,
                        sorted(holders[distinct[position]]),
                        "near",
                        similarity,
                        share,
                    )
                )
    check.overlaps.sort(key=lambda o: (o.left_id, o.left_field, o.kind, o.right))
    return check


def check_leakage(
    heldout_inputs: Sequence[Any],
    rm_train_pairs: Sequence[Any],
    training_prompts: Sequence[Any] | None = None,
    training_pairs: Sequence[Any] | None = None,
    *,
    containment: float = CONTAINMENT,
    jaccard: float | None = None,
) -> LeakageReport:
    """Compare held-out inputs with the held-out RM's training pairs (and, when given, the
    policy's training prompts); compare the RM's training prompts with the training RM's.

    Inputs are records with ``id`` and ``prompt`` or ``messages`` (EnvInput.data, dicts),
    pairs are dicts or PreferencePair objects with ``prompt``/``chosen``/``rejected``, prompts
    are records or plain strings.
    """
    inputs = _record_items(heldout_inputs, ("prompt",), "input-")
    pair_fields = ("prompt", "chosen", "rejected")
    rm_items = _record_items(rm_train_pairs, pair_fields, "pair-")
    options: dict[str, Any] = {"containment": containment, "jaccard": jaccard}
    checks = [
        compare(
            "inputs_vs_rm_train",
            inputs,
            rm_items,
            ("held-out inputs", "RM training pairs"),
            **options,
        )
    ]
    if training_prompts is not None:
        prompts = _record_items(training_prompts, ("prompt",), "prompt-")
        checks.append(
            compare(
                "inputs_vs_training_prompts",
                inputs,
                prompts,
                ("held-out inputs", "training prompts"),
                **options,
            )
        )
    if training_pairs is not None:
        policy_rm = _record_items(training_pairs, ("prompt",), "train-pair-")
        rm_prompts = [item for item in rm_items if item[1] in ("prompt", "messages")]
        checks.append(
            compare(
                "rm_train_vs_training_rm_pairs",
                rm_prompts,
                policy_rm,
                ("RM training pairs", "training-RM pairs"),
                **options,
            )
        )
    return LeakageReport(checks, describe_method(containment, jaccard))


def read_records(path: str | Path) -> list[Any]:
    """A JSONL file of records (or JSON strings), for the spec's training_prompts/pairs files."""
    from rlenv.errors import UserError
    from rlenv.jsonl import json_lines, parse_json_line

    path = Path(path)
    if not path.is_file():
        raise UserError("file not found", where=str(path))
    records: list[Any] = []
    try:
        lines = list(json_lines(path))
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text", where=str(path)) from None
    for number, line in lines:
        if not line.strip():
            continue
        try:
            records.append(parse_json_line(line))
        except ValueError as exc:
            raise UserError(f"invalid JSON: {exc}", where=f"{path}:{number}") from None
    return records


def _pinned(loaded: Any, ref: Any, field_name: str) -> Path:
    """Resolve a spec file reference and check its pinned sha256 when it has one."""
    from rlenv.canonical import sha256_file
    from rlenv.errors import SpecError

    path = loaded.resolve(ref.path)
    if not path.is_file():
        raise SpecError(f"{field_name}.path: file not found: {path}", where=str(loaded.path))
    pinned = getattr(ref, "sha256", None)
    if pinned and sha256_file(path) != pinned:
        raise SpecError(
            f"{field_name}.sha256: hash mismatch for {path.name}: pinned {pinned[:12]}…,"
            f" file has {sha256_file(path)}",
            where=str(loaded.path),
        )
    return path


def spec_leakage(loaded: Any) -> LeakageReport | None:
    """The leakage report for a spec whose reward_model names its training data; else None.

    Reads ``reward_model.train_data`` (the held-out RM's preference pairs) and, when present,
    ``reward_model.training_prompts`` (the policy's RL prompts) and
    ``reward_model.training_pairs`` (the training RM's preference data).
    """
    config = loaded.spec.reward_model
    train_data = getattr(config, "train_data", None)
    if config is None or train_data is None:
        return None
    from rlenv.inputs import load_inputs, render
    from rlenv.rm.train import read_prefs  # numpy: only for an env that has the data

    template = loaded.spec.prompt
    inputs = [  # a templated input is compared by the prompt the policy sees
        {**record.data, "prompt": render(template.template, record.data)}
        if template
        else record.data
        for record in load_inputs(
            loaded.inputs_path,
            templated=template is not None,
            rows=loaded.spec.inputs.dataset is not None,
        )
    ]
    pairs = read_prefs(_pinned(loaded, train_data, "reward_model.train_data"))
    prompts_ref = getattr(config, "training_prompts", None)
    pairs_ref = getattr(config, "training_pairs", None)
    prompts = (
        read_records(_pinned(loaded, prompts_ref, "reward_model.training_prompts"))
        if prompts_ref
        else None
    )
    other_pairs = (
        read_records(_pinned(loaded, pairs_ref, "reward_model.training_pairs"))
        if pairs_ref
        else None
    )
    return check_leakage(inputs, pairs, prompts, other_pairs)


def enforce_leakage(loaded: Any) -> list[str]:
    """Run the spec's leakage check: raise SpecError when ``on_leak: error``, else return the
    warning lines (empty when clean or when the spec names no training data)."""
    from rlenv.errors import SpecError

    report = spec_leakage(loaded)
    if report is None or report.ok:
        return []
    lines = [line for line in report.summary().splitlines() if "no overlap" not in line]
    if getattr(loaded.spec.reward_model, "on_leak", "error") == "error":
        raise SpecError(
            "held-out leakage: " + "; ".join(lines) + " (set reward_model.on_leak: warn to allow)",
            where=str(loaded.path),
        )
    return [f"warning: held-out leakage: {line}" for line in lines]


def train_overlap(heldout: Iterable[Any], train: Iterable[Any]) -> OverlapScan:
    """Held-out inputs whose prompt appears (exactly or nearly) among the training inputs'
    (records with ``id`` and ``prompt``/``messages``): the spec's ``train_inputs`` check."""
    return compare(
        "inputs_vs_train_inputs",
        _record_items(heldout, ("prompt",), "input-"),
        _record_items(train, ("prompt",), "train-"),
        ("held-out inputs", "training inputs"),
    )
