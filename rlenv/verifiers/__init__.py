"""Programmatic verifiers, run first on every rollout (the reward model comes second)."""

from rlenv.verifiers.builtin import VerifierContext, VerifierResult, build_verifiers

__all__ = ["VerifierContext", "VerifierResult", "build_verifiers"]
