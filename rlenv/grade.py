"""`rlenv grade RUN_DIR`: run the verifiers a run deferred, then rewrite results and summary.

Late grades are only ever applied to the run they belong to: the env fingerprint must be the
run's, and every record must come from the run's model.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.audit import baseline_of, read_audited_run, seal_run_json
from rlenv.env import load_environment
from rlenv.errors import UserError, WorkerLost
from rlenv.executors.local import LocalExecutor
from rlenv.files import atomic_write
from rlenv.results import RolloutRecord, encode_line, order_key
from rlenv.runner import _cache_dir, _pretty, weak_sandbox_allowed
from rlenv.summary import build_summary
from rlenv.worker.config import WorkerConfig
from rlenv.worker.lost import late_grade_lost


@dataclass
class GradeResult:
    graded: int
    cache_hits: int
    cache_misses: int
    summary: dict[str, Any]


def grade(
    run_dir: str | Path,
    *,
    grader_cache: bool | Path = True,
    workers: int = 2,
    allow_weak_sandbox: bool = False,
) -> GradeResult:
    """Run the verifiers a run deferred; `allow_weak_sandbox` as in `rlenv.runner.run`."""
    run_path = Path(run_dir)
    meta_path = run_path / "run.json"
    results_path = run_path / "results.jsonl"
    if not meta_path.is_file() or not results_path.is_file():
        raise UserError(
            "not a run directory (needs run.json and results.jsonl)", where=str(run_path)
        )
    # the run as every reader verifies it (records, summary.json and run.json agree), before
    # the env run.json names is loaded
    verified = read_audited_run(run_path)
    try:
        meta = verified.meta
        spec_path = meta["spec"]
    except (ValueError, KeyError, TypeError):
        raise UserError("run.json is not an rlenv run record", where=str(meta_path)) from None
    prepared = load_environment(spec_path, purpose="grade")
    if prepared.fingerprint != meta["env"]["fingerprint"]:
        raise UserError(
            f"the env changed since this run (fingerprint {prepared.fingerprint[:12]}… vs"
            f" {meta['env']['fingerprint'][:12]}…); late grades would mix environments",
            where=str(run_path),
        )
    records = verified.records
    model = meta["model"]["uri"]
    others = sorted({str(record.get("model")) for record in records} - {model})
    if others:
        raise UserError(
            f"results.jsonl holds rollouts of another model ({others[0]}); refusing to grade",
            where=str(results_path),
        )
    pending = [record for record in records if record.get("grading") == "pending"]
    hits = misses = 0
    if pending:
        work_root = Path(tempfile.mkdtemp(prefix="rlenv-grade-"))
        try:
            config = WorkerConfig(
                spec_path=str(prepared.loaded.path),
                work_root=str(work_root),
                cache_dir=_cache_dir(grader_cache),
                allow_weak_sandbox=allow_weak_sandbox or weak_sandbox_allowed(),
            )
            executor = LocalExecutor(config, min(workers, len(pending)))
            try:
                timeout_s = prepared.loaded.spec.limits.timeout_s
                graded = asyncio.run(_grade_all(executor, pending, timeout_s))
            finally:
                executor.close()
        finally:
            shutil.rmtree(work_root, ignore_errors=True)
        by_key = {}
        for record, record_hits, record_misses in graded:
            hits, misses = hits + record_hits, misses + record_misses
            record.setdefault("timing", {})["graded_late"] = True
            by_key[(record["input_id"], record["rollout"])] = record
        records = [by_key.get((r["input_id"], r["rollout"]), r) for r in records]
        records.sort(key=order_key)
        atomic_write(results_path, b"".join(encode_line(record) + b"\n" for record in records))
    summary = build_summary(
        prepared, meta, records, model, str(results_path), baseline=baseline_of(meta, run_path)
    )
    atomic_write(run_path / "summary.json", _pretty(seal_run_json(summary, run_path)))
    return GradeResult(len(pending), hits, misses, summary)


async def _grade_all(
    executor: LocalExecutor, records: list[RolloutRecord], timeout_s: float
) -> list[Any]:
    """Each record's deferred verifiers, within `limits.timeout_s` (a worker that overruns is
    killed and replaced, and that record's verdict says so: see `late_grade_lost`)."""

    async def one(record: RolloutRecord) -> tuple[RolloutRecord, int, int]:
        try:
            return await executor.grade(record, timeout_s)
        except WorkerLost as lost:
            return late_grade_lost(record, lost.status, lost.error), 0, 0

    return list(await asyncio.gather(*(one(record) for record in records)))
