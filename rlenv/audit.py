"""`rlenv check RUN_DIR [--against OTHER]`: a run verified by the one reader every command uses
(rlenv.audit_reader.read_audited_run), and two runs' outcomes compared (:class:`AgainstResult`).
README: "Checking a run".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.audit_reader import (  # noqa: F401 - the reader's names, as rlenv.audit always gave them
    AuditedRun,
    baseline_of,
    brief,
    read_audited_run,
    read_baseline,
    recompute_summary,
    run_json_digest,
    seal_run_json,
)
from rlenv.audit_records import (  # noqa: F401 - the record reader lives below the runner; its names stay
    DENSE_ROLLOUTS,
    RecordAudit,
    TamperedRun,
    audited_records,
    expected_inputs,
    numbered_records,
)
from rlenv.results import SCORE_TOLERANCE, run_outcome_digest


@dataclass
class AuditResult:
    """What `rlenv check` found: ``problems`` is empty when the run is intact."""

    run_dir: str
    records: int = 0
    digest: str | None = None
    outcome_digest: str | None = None
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
            "outcome_digest": self.outcome_digest,
            "problems": self.problems,
        }


def audit_run(run_dir: str | Path) -> AuditResult:
    """Verify a run directory with :func:`read_audited_run` (what every reader of a run
    checks). Bad input (not a run directory, a file that is not JSON) is a UserError;
    tampering is the problem listed (the first found)."""
    path = Path(run_dir)
    result = AuditResult(str(path))
    try:
        run = read_audited_run(path)
    except TamperedRun as exc:
        result.problems.append(str(exc))
        return result
    result.records = len(run.records)
    result.digest = str(run.summary.get("digest"))
    result.outcome_digest = run.summary.get("outcome_digest") or run_outcome_digest(run.records)
    return result


_TOLERANCE = f"{SCORE_TOLERANCE:.0e}".replace("e-0", "e-")  # "1e-6"


@dataclass
class AgainstResult:
    """`rlenv check RUN --against OTHER`: both runs verified, then their outcomes compared
    exactly and their model scores within :data:`rlenv.results.SCORE_TOLERANCE`."""

    run_dir: str
    other: str
    outcome_digests: tuple[str, str]
    difference: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.difference is None

    @property
    def message(self) -> str:
        if self.difference is None:
            return f"same outcomes; scores within {_TOLERANCE}"
        found = self.difference
        what = (
            "outcomes differ"
            if found["kind"] == "outcome"
            else f"same outcomes; scores differ by more than {_TOLERANCE}"
        )
        return (
            f"{what} at input {found['input_id']!r} rollout {found['rollout']}:"
            f" {found['field']} ({brief(found['a'])} vs {brief(found['b'])})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "against": self.other,
            "ok": self.ok,
            "message": self.message,
            "outcome_digests": list(self.outcome_digests),
            "tolerance": SCORE_TOLERANCE,
            "difference": self.difference,
        }


def audit_against(run_dir: str | Path, other: str | Path) -> AgainstResult:
    """Verify both runs (:func:`read_audited_run`; TamperedRun names the first problem), then
    name the first (input, rollout, field) whose outcome differs, else the first model score
    further apart than the tolerance (DESIGN: "The same outcome on any machine")."""
    from rlenv.divergence import first_outcome_difference

    mine, theirs = read_audited_run(run_dir), read_audited_run(other)
    return AgainstResult(
        str(run_dir),
        str(other),
        (run_outcome_digest(mine.records), run_outcome_digest(theirs.records)),
        first_outcome_difference(mine.records, theirs.records),
    )
