"""Rollout diversity: distinct-n, duplicate rates, pairwise similarity and mode collapse.

n-grams are over whitespace tokens of ``answer`` (case-sensitive).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rlenv.metrics._records import Record, _group, _mean, _ngrams, _words


def _jaccard(a: str, b: str) -> float:
    """Jaccard similarity of word-bigram sets; word sets when both have no bigram; 1.0 if
    both answers have no words at all."""
    ta, tb = _words(a), _words(b)
    sa, sb = set(_ngrams(ta, 2)), set(_ngrams(tb, 2))
    if not sa and not sb:
        sa, sb = {(t,) for t in ta}, {(t,) for t in tb}
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def _distinct(answers: Sequence[str], n: int) -> float | None:
    grams = [g for answer in answers for g in _ngrams(_words(answer), n)]
    return len(set(grams)) / len(grams) if grams else None


def _duplicates(answers: Sequence[str]) -> int:
    """How many answers equal an earlier one."""
    seen: set[str] = set()
    duplicates = 0
    for answer in answers:
        duplicates += answer in seen
        seen.add(answer)
    return duplicates


def _mean_similarity(answers: Sequence[str]) -> float:
    """Mean Jaccard similarity over all pairs of (at least two) answers."""
    pairs = [
        _jaccard(answers[i], answers[j])
        for i in range(len(answers))
        for j in range(i + 1, len(answers))
    ]
    return math.fsum(pairs) / len(pairs)


def diversity(
    records: Iterable[Record],
    n: Sequence[int] = (1, 2),
    similarity_threshold: float = 0.9,
    duplicate_threshold: float = 0.5,
) -> dict[str, Any]:
    """Rollout diversity and a mode-collapse flag.

    - ``distinct``: distinct-n (unique n-grams / total n-grams) over all answers;
      ``distinct_per_input``: the same within each input, averaged over inputs.
    - ``duplicate_rate``: per input, the share of rollouts whose answer equals an earlier
      rollout's (by rollout index), averaged over inputs with >= 2 answers;
      ``duplicate_rate_global``: the same over all answers in (input_id, rollout) order, so an
      answer repeated across inputs counts too.
    - ``mean_pairwise_similarity``: mean Jaccard similarity of word-bigram sets over pairs of
      rollouts of one input, averaged over inputs.
    - ``collapse``: similarity >= ``similarity_threshold`` or duplicate rate >=
      ``duplicate_threshold``. Short exact answers (math) repeat legitimately; read with care.

    Rollouts without an answer (None) are left out. Keys of the n-gram dicts are str(n).
    """
    groups = [
        (input_id, [str(r["answer"]) for r in group if r.get("answer") is not None])
        for input_id, group in _group(records)
    ]
    groups = [(input_id, answers) for input_id, answers in groups if answers]
    all_answers = [a for _, answers in groups for a in answers]
    distinct: dict[str, float | None] = {}
    distinct_per_input: dict[str, float | None] = {}
    for size in n:
        distinct[str(size)] = _distinct(all_answers, size)
        per_input = [_distinct(answers, size) for _, answers in groups]
        distinct_per_input[str(size)] = _mean([v for v in per_input if v is not None])
    multi = [answers for _, answers in groups if len(answers) >= 2]
    duplicate_rates = [_duplicates(answers) / len(answers) for answers in multi]
    similarities = [_mean_similarity(answers) for answers in multi]
    duplicates_global = _duplicates(all_answers)
    duplicate_rate = _mean(duplicate_rates)
    similarity = _mean(similarities)
    collapse = (similarity is not None and similarity >= similarity_threshold) or (
        duplicate_rate is not None and duplicate_rate >= duplicate_threshold
    )
    return {
        "n_answers": len(all_answers),
        "distinct": distinct,
        "distinct_per_input": distinct_per_input,
        "duplicate_rate": duplicate_rate,
        "duplicate_rate_global": duplicates_global / len(all_answers) if all_answers else None,
        "mean_pairwise_similarity": similarity,
        "collapse": bool(collapse),
        "thresholds": {"similarity": similarity_threshold, "duplicate_rate": duplicate_threshold},
    }
