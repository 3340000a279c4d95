"""Scheduling expensive verifiers and the content-addressed grader cache.

An expensive verifier (a test suite, a benchmark) may be run on a seeded sample of rollouts
(`--expensive-fraction`), deferred to a later `rlenv grade RUN_DIR` pass (`--defer-expensive`),
and its grades are cached under a key made of the verifier's identity and version and the
rollout's content, so re-grading and re-runs skip work already done. A cached grade is the
stored result of the same computation: `rlenv verify` checks cached and uncached runs agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.canonical import canonical_bytes, sha256_bytes, sha256_json
from rlenv.files import atomic_write
from rlenv.seeding import derive_seed

PENDING = "pending"
SKIPPED = "not sampled"
NOT_APPLICABLE = "not applicable"  # the verifier's `when:` does not match the input


def sampled(env_seed: int, input_id: str, rollout: int, fraction: float) -> bool:
    """Whether this rollout is in the seeded sample that gets the expensive verifiers."""
    if fraction >= 1:
        return True
    if fraction <= 0:
        return False
    return derive_seed(env_seed, "expensive", input_id, rollout) / 2**53 < fraction


def rollout_hash(
    answer: str | None, messages: list[dict[str, Any]], data: dict[str, Any], world: dict[str, Any]
) -> str:
    """What a verifier can see of a rollout, hashed: the cache key's content part."""
    return sha256_json({"answer": answer, "messages": messages, "input": data, "world": world})


@dataclass
class GraderCache:
    """One JSON file per grade under root/ab/<key>.json, written atomically."""

    root: Path
    hits: int = 0
    misses: int = 0

    def key(self, verifier: dict[str, Any], content: str) -> str:
        return sha256_bytes(canonical_bytes({"verifier": verifier, "rollout": content}))

    def get(self, key: str) -> dict[str, Any] | None:
        path = self.root / key[:2] / f"{key}.json"
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return value  # type: ignore[no-any-return]

    def put(self, key: str, result: dict[str, Any]) -> None:
        path = self.root / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, canonical_bytes(result))


def verifier_identity(config: Any, module_hash: str | None) -> dict[str, Any]:
    """The verifier's configuration, its declared version and its module's source hash."""
    identity = {"config": json.loads(config.model_dump_json(by_alias=True))}
    if module_hash:
        identity["source"] = module_hash
    return identity
