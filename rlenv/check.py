"""A digest that is earned: read a run's records while recomputing each one's digest from its
content, and refuse duplicates and gaps; `rlenv check RUN_DIR` on top (README: "Checking a run").

Every reader of results.jsonl that turns records into numbers (the summary, `rlenv grade`,
`rlenv report`, `rlenv compare`) goes through :func:`verified_records`, so a flipped verdict,
an edited answer, a duplicated or a deleted line is an error naming the file and line, never a
changed pass rate. (`rlenv run` reads back only the lines an earlier run left; the lines it
wrote itself get :meth:`RecordChecks.check_key`, their digests sealed by its workers.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.canonical import canonical_bytes
from rlenv.errors import UserError
from rlenv.integrity import (  # noqa: F401 - the reader moved below the runner; its names stay
    DENSE_ROLLOUTS,
    RecordChecks,
    TamperedRun,
    expected_inputs,
    numbered_records,
    read_baseline,
    read_verified,
    verified_records,
)
from rlenv.jsonl import parse_json_line
from rlenv.results import RunDigest, order_key

SUMMARY_FIELDS = ("rollouts", "inputs", "counts", "pass_rate", "pass_at_k", "pass_hat_k")


@dataclass
class CheckResult:
    """What `rlenv check` found: ``problems`` is empty when the run is intact."""

    run_dir: str
    records: int = 0
    digest: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "ok": self.ok,
            "records": self.records,
            "digest": self.digest,
            "problems": self.problems,
        }


def check_run(run_dir: str | Path) -> CheckResult:
    """Verify a run directory: run.json present, every record matches its digest, no duplicate
    and no gap, and summary.json's digest and numbers equal the ones recomputed from the
    records. Bad input (not a run directory) is a UserError; tampering is a problem listed."""
    from rlenv import metrics

    path = Path(run_dir)
    result = CheckResult(str(path))
    results = path / "results.jsonl"
    if not path.is_dir() or not results.is_file():
        raise UserError("not a run directory (no results.jsonl)", where=str(path))
    meta = _json_object(path / "run.json", result)
    summary = _json_object(path / "summary.json", result)
    if meta is None or summary is None:
        return result
    per_input = meta.get("rollouts_per_input")
    try:
        records = read_verified(
            results,
            rollouts_per_input=per_input if isinstance(per_input, int) else None,
            inputs=expected_inputs(meta, summary),
        )
    except TamperedRun as exc:
        result.problems.append(str(exc))
        return result
    digest = RunDigest()
    for record in records:
        digest.add(record)
    result.records, result.digest = len(records), digest.hexdigest()
    if summary.get("digest") != result.digest:
        result.problems.append(
            f"{path / 'summary.json'}: digest {str(summary.get('digest'))[:12]} is not the"
            f" records' digest {result.digest[:12]}"
        )
    records.sort(key=order_key)
    diagnostics = metrics.compute_all(records)
    recomputed = {
        "rollouts": len(records),
        "inputs": len({record["input_id"] for record in records}),
        "counts": diagnostics["counts"]["by_status"],
        "pass_rate": diagnostics["pass_rate"],
        "pass_at_k": diagnostics["pass_k"]["pass@k"],
        "pass_hat_k": diagnostics["pass_k"]["pass^k"],
    }
    for key in SUMMARY_FIELDS:
        if canonical_bytes(summary.get(key)) != canonical_bytes(recomputed[key]):
            result.problems.append(
                f"{path / 'summary.json'}: {key} does not match the records"
                f" ({json.dumps(summary.get(key))[:60]} vs {json.dumps(recomputed[key])[:60]})"
            )
    return result


def _json_object(path: Path, result: CheckResult) -> dict[str, Any] | None:
    if not path.is_file():
        result.problems.append(f"{path}: missing")
        return None
    try:  # bounded: a file nested 200,000 deep is a bad input, not a RecursionError
        value = parse_json_line(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"not readable JSON: {exc}", where=str(path)) from None
    if not isinstance(value, dict):
        raise UserError("not a JSON object", where=str(path))
    return value
