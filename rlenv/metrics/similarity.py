"""Rollout diversity: distinct-n, duplicate rates, pairwise similarity and mode collapse, for
the run and for each input.

n-grams are over whitespace tokens of ``answer`` (case-sensitive). Collapse is decided per
input: answers compared after normalisation (case, punctuation and spacing ignored), and
word bigrams that most inputs' answers share (boilerplate such as a fixed preamble) left out of
the similarity, so a run-wide template is not mistaken for collapse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from rlenv.metrics._records import Record, _group, _mean, _ngrams, _reward, _words

Bigrams = frozenset[tuple[str, ...]]

BOILERPLATE_SHARE = 0.5
"""A word bigram in the answers of at least this share of inputs is boilerplate."""
BOILERPLATE_MIN_INPUTS = 5
"""Fewer inputs than this: nothing is called boilerplate (one input shares all its bigrams)."""
_PUNCTUATION = re.compile(r"[^\w\s]+")


def _spread(rewards: Sequence[float]) -> float | None:
    """Population standard deviation of an input's rewards (None below two)."""
    if len(rewards) < 2:
        return None
    import numpy as np

    return float(np.std(rewards))


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


def normalise(answer: str) -> str:
    """An answer as collapse compares it: case-folded, punctuation dropped, spacing collapsed."""
    return " ".join(_PUNCTUATION.sub(" ", answer.casefold()).split())


def _bigrams(answer: str) -> Bigrams:
    return _bigrams_of(normalise(answer))


def _bigrams_of(normalised: str) -> Bigrams:
    """:func:`_bigrams` of an answer already normalised."""
    words = normalised.split()
    grams = _ngrams(words, 2) if len(words) >= 2 else [tuple(words)] if words else []
    return frozenset(grams)


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
    """Mean Jaccard similarity (:func:`_jaccard`) over all pairs of (at least two) answers,
    each answer's n-gram sets built once."""
    words = [_words(a) for a in answers]
    bigrams = [set(_ngrams(w, 2)) for w in words]
    unigrams: list[set[tuple[str, ...]]] = [{(t,) for t in w} for w in words]
    pairs = []
    for i in range(len(answers)):
        for j in range(i + 1, len(answers)):
            sa, sb = bigrams[i], bigrams[j]
            if not sa and not sb:
                sa, sb = unigrams[i], unigrams[j]
            union = len(sa | sb)
            pairs.append(len(sa & sb) / union if union else 1.0)
    return math.fsum(pairs) / len(pairs)


def boilerplate(groups: Sequence[Sequence[str]], share: float = BOILERPLATE_SHARE) -> Bigrams:
    """Normalised word bigrams found in the answers of at least ``share`` of the inputs
    (none with fewer than BOILERPLATE_MIN_INPUTS inputs)."""
    if len(groups) < BOILERPLATE_MIN_INPUTS:
        return frozenset()
    counts: dict[tuple[str, ...], int] = {}
    for answers in groups:
        for gram in frozenset().union(*(_bigrams(a) for a in answers)):
            counts[gram] = counts.get(gram, 0) + 1
    floor = share * len(groups)
    return frozenset(gram for gram, count in counts.items() if count >= floor)


SIMILARITY_ANSWERS = 16
"""Per-input similarity compares the first this many rollouts (120 pairs), so K = 100 costs
no more than K = 16; the duplicate rate counts every rollout."""


def _discounted_similarity(answers: Sequence[str], shared: Bigrams) -> float:
    """Mean pairwise Jaccard similarity of normalised bigram sets without the boilerplate, over
    the first SIMILARITY_ANSWERS answers; two answers with nothing left are alike only when
    their normalised texts are equal."""
    answers = answers[:SIMILARITY_ANSWERS]
    sets = [_bigrams(a) - shared for a in answers]
    texts = [normalise(a) for a in answers]
    pairs = []
    for i in range(len(answers)):
        for j in range(i + 1, len(answers)):
            union = sets[i] | sets[j]
            if union:
                pairs.append(len(sets[i] & sets[j]) / len(union))
            else:
                pairs.append(1.0 if texts[i] == texts[j] else 0.0)
    return math.fsum(pairs) / len(pairs)


def per_input_diversity(
    records: Iterable[Record],
    similarity_threshold: float = 0.9,
    duplicate_threshold: float = 0.5,
) -> list[dict[str, Any]]:
    """One row per input (sorted): answers, duplicate rate (normalised answers equal to an
    earlier rollout's), mean pairwise similarity with boilerplate discounted (first
    SIMILARITY_ANSWERS rollouts), reward spread
    (population std of its rewards; None below two) and ``collapsed``: at least two answers
    and duplicate rate >= ``duplicate_threshold`` or similarity >= ``similarity_threshold``.
    """
    grouped = [(input_id, group) for input_id, group in _group(records)]
    answers_of = [
        [str(r["answer"]) for r in group if r.get("answer") is not None] for _, group in grouped
    ]
    shared = boilerplate([a for a in answers_of if a])
    rows = []
    for (input_id, group), answers in zip(grouped, answers_of, strict=True):
        rewards = [v for v in (_reward(r) for r in group) if v is not None]
        duplicate_rate = similarity = None
        if len(answers) >= 2:
            duplicate_rate = _duplicates([normalise(a) for a in answers]) / len(answers)
            similarity = _discounted_similarity(answers, shared)
        collapsed = (duplicate_rate is not None and duplicate_rate >= duplicate_threshold) or (
            similarity is not None and similarity >= similarity_threshold
        )
        rows.append(
            {
                "input_id": input_id,
                "n_answers": len(answers),
                "distinct_answers": len({normalise(a) for a in answers}),
                "duplicate_rate": duplicate_rate,
                "similarity": similarity,
                "reward_spread": _spread(rewards),
                "collapsed": bool(collapsed),
            }
        )
    return rows


def diversity(
    records: Iterable[Record],
    n: Sequence[int] = (1, 2),
    similarity_threshold: float = 0.9,
    duplicate_threshold: float = 0.5,
    collapse_share: float = 0.1,
) -> dict[str, Any]:
    """Rollout diversity, per input and over the run, and a mode-collapse verdict.

    - ``distinct``: distinct-n (unique n-grams / total n-grams) over all answers;
      ``distinct_per_input``: the same within each input, averaged over inputs.
    - ``duplicate_rate``: per input, the share of rollouts whose answer equals an earlier
      rollout's (by rollout index), averaged over inputs with >= 2 answers;
      ``duplicate_rate_global``: the same over all answers in (input_id, rollout) order, so an
      answer repeated across inputs counts too.
    - ``mean_pairwise_similarity``: mean Jaccard similarity of word-bigram sets over pairs of
      rollouts of one input, averaged over inputs.
    - ``per_input`` (:func:`per_input_diversity`): each input's duplicate rate, similarity
      with boilerplate discounted, reward spread and whether it ``collapsed``;
      ``collapsed_inputs`` names those that did, ``collapsed_share`` is their share of the
      inputs with >= 2 answers.
    - ``collapse``: ``collapsed_share`` >= ``collapse_share`` (4 collapsed inputs of 40 is
      enough: an average over the run would hide them). Short exact answers (math) repeat
      legitimately; read with care.

    Rollouts without an answer (None) are left out. Keys of the n-gram dicts are str(n).
    """
    records = list(records)
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
    rows = per_input_diversity(records, similarity_threshold, duplicate_threshold)
    return {
        "n_answers": len(all_answers),
        "distinct": distinct,
        "distinct_per_input": distinct_per_input,
        "duplicate_rate": _mean(duplicate_rates),
        "duplicate_rate_global": duplicates_global / len(all_answers) if all_answers else None,
        "mean_pairwise_similarity": _mean(similarities),
        **_collapse(rows, similarity_threshold, duplicate_threshold, collapse_share),
    }


def _collapse(
    rows: list[dict[str, Any]],
    similarity_threshold: float,
    duplicate_threshold: float,
    collapse_share: float,
) -> dict[str, Any]:
    """The per-input rows and the run's mode-collapse verdict from them (`diversity`)."""
    comparable = [row for row in rows if row["n_answers"] >= 2]
    collapsed = [row["input_id"] for row in comparable if row["collapsed"]]
    share = len(collapsed) / len(comparable) if comparable else None
    return {
        "per_input": rows,
        "collapsed_inputs": collapsed,
        "collapsed_share": share,
        "collapse": share is not None and share >= collapse_share,
        "thresholds": {
            "similarity": similarity_threshold,
            "duplicate_rate": duplicate_threshold,
            "collapsed_share": collapse_share,
        },
    }


class DiversityTally:
    """:func:`diversity` (default n and thresholds), folded one input at a time (:meth:`fold`,
    given the input's scored records in rollout order): of a folded input only its row, its
    first SIMILARITY_ANSWERS answers (the boilerplate is known only at the end) and the
    run-wide sets of distinct n-grams and answers are kept."""

    def __init__(self) -> None:
        # per input: (n_answers, distinct_answers, duplicate_rate, reward_spread); its row is
        # built at the end (a tuple holds a third of a row dict's memory)
        self._rows: dict[str, tuple[int, int, float | None, float | None]] = {}
        self._first: dict[str, list[str]] = {}  # only inputs with two answers or more
        self._distinct_per_input: dict[int, list[float]] = {1: [], 2: []}
        self._grams: dict[int, set[str]] = {1: set(), 2: set()}
        self._gram_total = {1: 0, 2: 0}
        self._answers: set[str] = set()
        self._n_answers = 0
        self._duplicate_rates: list[float] = []
        self._similarities: list[float] = []
        self._bigram_inputs: dict[tuple[str, ...], int] = {}
        self._answered_inputs = 0

    def fold(
        self,
        input_id: str,
        group: Sequence[Record],
        rewards: Sequence[float | None] | None = None,
    ) -> None:
        """One input's records (`rewards`: their :func:`_reward`, when known already); each
        answer normalised and split into words once."""
        answers = [str(r["answer"]) for r in group if r.get("answer") is not None]
        if rewards is None:
            rewards = [_reward(r) for r in group]
        scores = [v for v in rewards if v is not None]
        normal = [normalise(a) for a in answers]
        duplicate_rate = None
        if len(answers) >= 2:
            duplicate_rate = _duplicates(normal) / len(answers)
            self._duplicate_rates.append(_duplicates(answers) / len(answers))
            self._similarities.append(_mean_similarity(answers))
        self._rows[input_id] = (len(answers), len(set(normal)), duplicate_rate, _spread(scores))
        if not answers:
            return
        if len(answers) >= 2:  # a similarity is measured only between two answers
            self._first[input_id] = answers[:SIMILARITY_ANSWERS]
        self._n_answers += len(answers)
        self._answers.update(answers)
        words = [_words(answer) for answer in answers]
        for size in (1, 2):
            grams = [" ".join(g) for tokens in words for g in _ngrams(tokens, size)]
            self._gram_total[size] += len(grams)
            self._grams[size].update(grams)
            if grams:
                self._distinct_per_input[size].append(len(set(grams)) / len(grams))
        self._answered_inputs += 1
        for gram in frozenset().union(*(_bigrams_of(text) for text in normal)):
            self._bigram_inputs[gram] = self._bigram_inputs.get(gram, 0) + 1

    def result(self) -> dict[str, Any]:
        """What :func:`diversity` returns for the folded inputs."""
        similarity_threshold, duplicate_threshold, collapse_share = 0.9, 0.5, 0.1
        shared: Bigrams = frozenset()
        if self._answered_inputs >= BOILERPLATE_MIN_INPUTS:
            floor = BOILERPLATE_SHARE * self._answered_inputs
            shared = frozenset(g for g, count in self._bigram_inputs.items() if count >= floor)
        rows = []
        for input_id in sorted(self._rows):
            n_answers, distinct, duplicate_rate, spread = self._rows[input_id]
            row: dict[str, Any] = {
                "input_id": input_id,
                "n_answers": n_answers,
                "distinct_answers": distinct,
                "duplicate_rate": duplicate_rate,
                "similarity": None,
                "reward_spread": spread,
                "collapsed": False,
            }
            if n_answers >= 2:
                row["similarity"] = _discounted_similarity(self._first[input_id], shared)
            row["collapsed"] = bool(
                (row["duplicate_rate"] is not None and row["duplicate_rate"] >= duplicate_threshold)
                or (row["similarity"] is not None and row["similarity"] >= similarity_threshold)
            )
            rows.append(row)
        total = self._n_answers
        return {
            "n_answers": total,
            "distinct": {
                str(size): len(self._grams[size]) / self._gram_total[size]
                if self._gram_total[size]
                else None
                for size in (1, 2)
            },
            "distinct_per_input": {
                str(size): _mean(self._distinct_per_input[size]) for size in (1, 2)
            },
            "duplicate_rate": _mean(self._duplicate_rates),
            "duplicate_rate_global": (total - len(self._answers)) / total if total else None,
            "mean_pairwise_similarity": _mean(self._similarities),
            **_collapse(rows, similarity_threshold, duplicate_threshold, collapse_share),
        }
