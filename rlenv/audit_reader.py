"""The one reader of a run directory, :func:`read_audited_run`, used by `rlenv check`, report,
compare, grade, watch, --resume and --baseline (README: "Checking a run").

It recomputes each record's digest from its content and refuses duplicates and gaps
(rlenv.audit_records.RecordAudit), recomputes summary.json from the records and run.json with the
function that wrote it (rlenv.summary) and names the first field that differs, and checks
run.json against the digest sealed in summary.json. So a flipped verdict, an edited answer, a
duplicated or deleted line, an edited reward statistic, flag, error count or verdict, and an
edited model or fingerprint are each one line naming the file and the field, never a changed
number. It sits below the runner (which seals run.json, reads its --baseline and resumes
through it) and imports nothing that runs rollouts (report reads through it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.audit_records import RecordAudit, TamperedRun, expected_inputs, numbered_records
from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.errors import UserError
from rlenv.jsonl import parse_json_line
from rlenv.results import CompactRecord, RolloutRecord, compact_for_metrics, read_results
from rlenv.summary import build_summary, judges_block


class BaselineRecords(list[CompactRecord]):
    """A ``--baseline`` run's records (compact), with ``source``: the directory as given and
    its run digest (run.json keeps it, so a reader can judge the run again the same way)."""

    source: dict[str, str]


def read_baseline(run_dir: str | Path, fingerprint: str | None) -> BaselineRecords:
    """The records of a ``--baseline`` run directory, read by :func:`read_audited_run` as
    every reader's, in the compact form the metrics read. UserError (one line) when it is not
    a run directory, or not intact, or its env fingerprint differs from ``fingerprint`` (a
    baseline must be the same env: same reward model, same verifiers)."""
    path = Path(run_dir)
    if not (path / "results.jsonl").is_file():
        raise UserError(f"--baseline {path}: no results.jsonl, not a run directory")
    try:
        run = read_audited_run(path)
    except UserError as exc:
        raise UserError(f"--baseline {exc}") from None
    theirs = (run.summary.get("env") or run.meta.get("env") or {}).get("fingerprint")
    if theirs and fingerprint and theirs != fingerprint:
        raise UserError(
            f"--baseline {path}: env fingerprint {str(theirs)[:12]} differs from the run's"
            f" {fingerprint[:12]} (a baseline must be the same env)"
        )
    shared: dict[Any, Any] = {}
    records = BaselineRecords(compact_for_metrics(record, shared) for record in run.records)
    records.source = {"run_dir": str(run_dir), "digest": str(run.summary.get("digest"))}
    return records


RUN_JSON_SEAL = "run_json_digest"
"""summary.json's field holding the digest of run.json's canonical content."""
NOT_RECOMPUTED = ("rlenv_version", RUN_JSON_SEAL, "groups")
"""summary.json fields not recomputed from the records: the version that wrote it, the seal
(checked against run.json itself), and ``groups`` (it needs the env's input fields)."""


FIRST_COMPARED = ("digest", "outcome_digest", "rollouts", "inputs", "counts")
"""Compared first: a changed record shows as a changed digest before any number it moves."""


def run_json_digest(run_dir: str | Path) -> str:
    """sha256 of run.json's canonical (RFC 8785) content: whitespace aside, any edit changes it."""
    path = Path(run_dir) / "run.json"
    return sha256_bytes(canonical_bytes(_read_object(path)))


def seal_run_json(summary: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """Seal run.json into ``summary`` (its digest under :data:`RUN_JSON_SEAL`), as written
    beside it: a later edit of run.json's model, fingerprint or settings is then tampering."""
    summary[RUN_JSON_SEAL] = run_json_digest(run_dir)
    return summary


@dataclass
class AuditedRun:
    """A run directory whose records, summary.json and run.json agree (read_audited_run)."""

    run_dir: Path
    meta: dict[str, Any]
    summary: dict[str, Any]
    records: list[RolloutRecord]
    """In file order; none torn, none twice, each matching its digest."""


def read_audited_run(run_dir: str | Path, *, resume: bool = False) -> AuditedRun:
    """The one reader of a run directory (`rlenv check`, report, compare, grade, --resume,
    --baseline): every record's digest recomputed, no duplicate and (but on ``resume``) no gap;
    summary.json recomputed from the records and run.json and compared field by field; run.json
    against the digest sealed in summary.json. TamperedRun (one line) names the first thing that
    differs; nothing is written.

    ``resume`` reads an interrupted run: rollouts may be missing and summary.json (rewritten
    from the records when the run ends) is not read; once the records are verified, a torn
    last line (a write cut short) is cut off. ``groups`` (per value of an input field) is not
    compared: it needs the env's inputs, which a reader of a run directory does not load."""
    path = Path(run_dir)
    results = path / "results.jsonl"
    if not path.is_dir() or not results.is_file():
        raise UserError("not a run directory (no results.jsonl)", where=str(path))
    meta_path, summary_path = path / "run.json", path / "summary.json"
    if not meta_path.is_file():
        raise TamperedRun("missing", where=str(meta_path))
    if not resume and not summary_path.is_file():
        raise TamperedRun(
            "missing (a run that did not finish: --resume it)", where=str(summary_path)
        )
    meta = _read_object(meta_path)
    per_input = meta.get("rollouts_per_input")
    per_input = (
        per_input if isinstance(per_input, int) and not isinstance(per_input, bool) else None
    )
    if resume:
        audit = RecordAudit(str(results), rollouts_per_input=per_input, inputs=_inputs_of(meta, {}))
        for number, record in numbered_records(results):
            audit.admit(number, record)
        # verified: now a torn last line (a write cut short by a crash) may be cut off
        return AuditedRun(path, meta, {}, read_results(results, repair=True))
    summary = _read_object(summary_path)
    records = [record for _, record in numbered_records(results)]  # each line parsed, bounded
    sealed = summary.get(RUN_JSON_SEAL)
    if sealed != sha256_bytes(canonical_bytes(meta)):
        raise TamperedRun(
            "does not match the digest sealed in summary.json"
            if sealed
            else "summary.json holds no seal of run.json (run.json's digest)",
            where=str(meta_path),
        )
    recomputed = recompute_summary(path, meta, summary, records)
    _compare_summary(summary, recomputed, summary_path)
    return AuditedRun(path, meta, summary, records)


def recompute_summary(
    run_dir: Path,
    meta: dict[str, Any],
    summary: dict[str, Any],
    records: list[RolloutRecord],
    prepared: Any = None,
) -> dict[str, Any]:
    """summary.json as `rlenv run` would write it from these records and this run.json (the
    same function, ``rlenv.summary.build_summary``, which verifies every record on the way:
    TamperedRun naming results.jsonl's line). The ``--baseline`` the run was judged against
    is read again (verified) from where run.json says, and must still have its digest."""
    from types import SimpleNamespace

    if prepared is None:  # what the summary needs of the env: how many inputs there were
        count = meta.get("inputs")
        if not isinstance(count, int) or isinstance(count, bool):
            expected = expected_inputs(meta, summary)
            count = len(expected) if isinstance(expected, list) else expected or 0
        prepared = SimpleNamespace(inputs=[SimpleNamespace(id=None, data={})] * count)
    try:
        summary = build_summary(
            prepared,
            {"limit": None, **meta},
            records,
            str((meta.get("model") or {}).get("uri")),
            str(run_dir / "results.jsonl"),
            baseline=baseline_of(meta, run_dir),
        )
        judged = judges_block(meta, run_dir)
        if judged is not None:
            summary["judges"] = judged
        return summary
    except (KeyError, TypeError, ValueError) as exc:
        raise TamperedRun(
            f"not an rlenv run record ({type(exc).__name__}: {exc})",
            where=str(run_dir / "run.json"),
        ) from None


_BASELINES_READING: set[str] = set()
"""The baselines being read (each reads its own baseline in turn): a cycle is refused."""


def baseline_of(meta: dict[str, Any], run_dir: Path) -> BaselineRecords | None:
    """The baseline run.json names (``{"run_dir", "digest"}``), read and verified again."""
    source = meta.get("baseline")
    if source is None:
        return None
    if not isinstance(source, dict) or not isinstance(source.get("run_dir"), str):
        raise TamperedRun("baseline is not {run_dir, digest}", where=str(run_dir / "run.json"))
    fingerprint = (meta.get("env") or {}).get("fingerprint")
    key = str(Path(source["run_dir"]).resolve())
    if key in _BASELINES_READING:  # run.json files naming each other, each sealed
        raise TamperedRun(f"baseline {key} is its own baseline", where=str(run_dir / "run.json"))
    _BASELINES_READING.add(key)
    try:
        baseline = read_baseline(source["run_dir"], fingerprint)
    except UserError as exc:
        raise TamperedRun(
            f"the run was judged against a baseline that cannot be read again: {exc}",
            where=str(run_dir / "run.json"),
        ) from None
    finally:
        _BASELINES_READING.discard(key)
    if baseline.source["digest"] != source.get("digest"):
        raise TamperedRun(
            f"its baseline {source['run_dir']} has digest {baseline.source['digest'][:12]},"
            f" not the {str(source.get('digest'))[:12]} the run was judged against",
            where=str(run_dir / "run.json"),
        )
    return baseline


SUMMARY_FLOAT_TOLERANCE = 1e-9
"""How far (relative) a summary's float may be from the one recomputed: a run written on one
machine is checked on another, whose NumPy (version, vector unit) may end a standard deviation
in another last bit; a forged figure moves far more. Digests, counts and flags are exact."""


def _compare_summary(summary: dict[str, Any], recomputed: dict[str, Any], where: Path) -> None:
    """TamperedRun naming the first field (in summary.json's order, dotted path) whose value
    is not the one recomputed from the records."""
    from rlenv.divergence import first_difference

    skipped = set(NOT_RECOMPUTED)
    order = [*FIRST_COMPARED, *recomputed, *summary]  # the digests, then as the summary is built
    keys = [key for key in dict.fromkeys(order) if key not in skipped]
    for key in keys:
        found = first_difference(
            summary.get(key, "<missing>"),
            recomputed.get(key, "<missing>"),
            key,
            float_tolerance=SUMMARY_FLOAT_TOLERANCE,
        )
        if found:
            field_path, stored, computed = found
            raise TamperedRun(
                f"{field_path} is {brief(stored)} in summary.json but {brief(computed)}"
                " recomputed from results.jsonl and run.json",
                where=str(where),
            )


def brief(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _inputs_of(meta: dict[str, Any], summary: dict[str, Any]) -> int | list[int] | None:
    try:
        return expected_inputs(meta, summary)
    except (TypeError, ValueError):
        raise TamperedRun("input_indices is not a list of integers", where="run.json") from None


def _read_object(path: Path) -> dict[str, Any]:
    """A JSON object file, parsed within bounds; UserError (one line) otherwise."""
    try:  # bounded: a file nested 200,000 deep is a bad input, not a RecursionError
        value = parse_json_line(path.read_text(encoding="utf-8"), own_file=True)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"not readable JSON: {exc}", where=str(path)) from None
    if not isinstance(value, dict):
        raise UserError("not a JSON object", where=str(path))
    return value
