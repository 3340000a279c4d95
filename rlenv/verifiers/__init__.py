"""Programmatic verifiers, run first on every rollout (the reward model comes second).

``builtin`` holds the plain checks and the type -> builder table; ``code`` the ones that run
the model's program in the sandbox; ``base`` what every verifier sees and returns (and what
makes a gold value unusable). How the text ones read an answer: ``numbers`` (and ``maths``,
math-verify) for numeric, ``text`` for contains, ``json_answers`` for json_schema.
"""

from rlenv.verifiers.base import VerifierContext, VerifierResult
from rlenv.verifiers.builtin import build_verifiers

__all__ = ["VerifierContext", "VerifierResult", "build_verifiers"]
