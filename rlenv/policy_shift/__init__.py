"""Policy shift: how far a checkpoint moved from its base model, per token and per run.

``kl`` (numpy only) has exact KL, the sampled estimators k1/k3, entropy and run aggregation;
``hazards`` flags decoding settings that bias sampled KL; ``hf`` runs local transformers
checkpoints as policy and reference (needs the ``rlenv[hf]`` extra, imported lazily).
"""

from __future__ import annotations

from rlenv.policy_shift.hazards import decoding_hazards, kl_flags
from rlenv.policy_shift.hf import (
    HFModel,
    VocabularyMismatchError,
    check_same_vocabulary,
    policy_shift,
    sampled_policy_shift,
)
from rlenv.policy_shift.kl import aggregate, entropy, exact_kl, k1, k3, to_bits

__all__ = [
    "HFModel",
    "VocabularyMismatchError",
    "aggregate",
    "check_same_vocabulary",
    "decoding_hazards",
    "entropy",
    "exact_kl",
    "k1",
    "k3",
    "kl_flags",
    "policy_shift",
    "sampled_policy_shift",
    "to_bits",
]
