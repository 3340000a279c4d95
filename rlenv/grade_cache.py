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
from typing import Any, Final

from rlenv.canonical import canonical_bytes, sha256_bytes, sha256_json
from rlenv.files import atomic_write
from rlenv.results import VERIFIER_ERROR, VerifierRecord
from rlenv.seeding import derive_seed

PENDING: Final = "pending"
SKIPPED = "not sampled"
NOT_APPLICABLE = "not applicable"  # the verifier's `when:` does not match the input
UNSCORED = frozenset({NOT_APPLICABLE, SKIPPED})
"""Why a verifier may give no value without anything being wrong (TRL reads None as "this
function does not apply to this completion")."""


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

    def get(self, key: str) -> VerifierRecord | None:
        path = self.root / key[:2] / f"{key}.json"
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return value  # type: ignore[no-any-return]

    def put(self, key: str, result: VerifierRecord) -> None:
        path = self.root / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, canonical_bytes(result))


def verifier_identity(config: Any, module_hash: str | None) -> dict[str, Any]:
    """The verifier's configuration, its declared version and its module's source hash.
    `config`: a `Verifier`, or its record (`rlenv.spec_data`), which holds that dump."""
    dumped = getattr(config, "dumped", None)
    if dumped is None:
        dumped = json.loads(config.model_dump_json(by_alias=True))
    identity = {"config": dumped}
    if module_hash:
        identity["source"] = module_hash
    return identity


def component_failure(
    record: dict[str, Any], name: str, verifier: str | None, value: float | None
) -> str | None:
    """Why reward component `name` (reading `verifier`, if any) has no honest value for this
    record (None: it has one, or rightly has none): the verifier it reads raised or was never
    graded, the reward function or model raised, or the rollout ended before grading."""
    results = {result["name"]: result for result in record.get("verifiers") or []}
    if verifier is not None:
        result = results.get(verifier)
        if result is None:
            return record.get("error") or f"verifier {verifier} did not run"
        detail = result.get("detail") or ""
        if result.get("passed") is None:
            return None if detail in UNSCORED else detail or "not graded"
        if detail.startswith(VERIFIER_ERROR):
            return f"verifier {verifier}: {detail}"
        return None
    if name == "passed":
        broken = [
            f"verifier {r['name']}: {r['detail']}"
            for r in results.values()
            if (r.get("detail") or "").startswith(VERIFIER_ERROR)
            or (r.get("passed") is None and r.get("detail") not in UNSCORED)
        ]
        if broken:
            return broken[0]
        if record.get("status") in ("verifier_error", "timeout"):
            return record.get("error") or str(record.get("status"))
        return None
    if value is None:
        return record.get("reward_error") or record.get("error") or "no value"
    return None
