"""The one seeding helper: rollout seeds are derived, never taken from global state."""

from __future__ import annotations

import hashlib
import random
import sys


def derive_seed(env_seed: int, *parts: object) -> int:
    """A 53-bit seed (exact in JSON) from the env seed and identifying parts (input id, rollout).

    Pure function of its arguments, so results do not depend on order or concurrency.
    """
    text = ":".join([str(env_seed), *(str(part) for part in parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 11


def seed_everything(seed: int) -> random.Random:
    """Seed Python's and NumPy's global RNGs (and torch's if loaded); return a fresh Random."""
    seed_globals(seed)
    return random.Random(seed)


def seed_globals(seed: int) -> None:
    """`seed_everything` where nothing takes the fresh Random (seeding one costs as much)."""
    random.seed(seed)
    if "numpy" in sys.modules:
        import numpy

        numpy.random.seed(seed % (2**32))
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.manual_seed(seed)
