"""A run that is earned: the one reader of a run directory, :func:`read_verified_run`, used by
`rlenv check`, report, compare, grade, watch, --resume and --baseline (README: "Checking a run").

It recomputes each record's digest from its content and refuses duplicates and gaps
(:class:`RecordChecks`), recomputes summary.json from the records and run.json with the
function that wrote it (rlenv.summary) and names the first field that differs, and checks
run.json against the digest sealed in summary.json. So a flipped verdict, an edited answer, a
duplicated or deleted line, an edited reward statistic, flag, error count or verdict, and an
edited model or fingerprint are each one line naming the file and the field, never a changed
number. (`rlenv run` reads back only the lines an earlier run left; the lines it wrote itself
get :meth:`RecordChecks.check_key`, their digests sealed by its workers.) `rlenv check RUN
--against OTHER` compares two verified runs' outcomes (:class:`AgainstResult`).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.errors import UserError
from rlenv.jsonl import parse_json_line
from rlenv.results import (
    SCORE_TOLERANCE,
    CompactRecord,
    read_results,
    record_digest,
    run_outcome_digest,
)


class TamperedRun(UserError):
    """A run directory whose records or summary do not match what they claim (exit 2 for the
    commands that read a run, exit 1 for `rlenv check`)."""


def numbered_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of results.jsonl, stopping at a torn last line (a crash
    mid-write; `--resume` cuts it off). A malformed line elsewhere is an error."""
    if not path.exists():
        return
    with open(path, "rb") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.endswith(b"\n"):
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                return
            raise TamperedRun("not a JSON record", where=f"{path}:{number}") from None
        except RecursionError:  # no torn write: rlenv never writes a line so deep
            raise TamperedRun("a line nested too deeply", where=f"{path}:{number}") from None
        if not isinstance(record, dict):
            raise TamperedRun("not a JSON object", where=f"{path}:{number}")
        yield number, record


def verified_records(
    records: Iterable[tuple[int, dict[str, Any]]],
    where: str,
    *,
    rollouts_per_input: int | None = None,
    inputs: int | Sequence[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """The records, each checked as it passes: its stored digest is recomputed from its
    content, and no (input, rollout) comes twice. When the iteration ends, every input has
    rollouts 0..K-1 (K = ``rollouts_per_input``) and, given ``inputs``, every input index
    0..inputs-1 (or every index of a list: a run of chosen inputs) is there. TamperedRun
    names ``where:LINE`` (or ``where`` for a gap)."""
    checks = RecordChecks(where, rollouts_per_input=rollouts_per_input, inputs=inputs)
    for number, record in records:
        checks.check(number, record)
        yield record
    checks.finish()


DENSE_ROLLOUTS = 1024
"""Up to this many rollouts per input, :class:`RecordChecks` keeps 8 bytes per (input, rollout)
slot (at most 8 KiB per input id a file names, a small multiple of its record's own size)."""


class RecordChecks:
    """What :func:`verified_records` checks, one record at a time, keeping a few bytes per
    record (a line number per (input, rollout) slot, one entry per input), so a 100k-rollout
    run is checked in little memory. :meth:`check` a whole record (its digest recomputed), or
    :meth:`check_key` only its place in the run (a record whose digest was sealed where it was
    made, in the worker, and that this process wrote itself); then :meth:`finish`."""

    def __init__(
        self,
        where: str,
        *,
        rollouts_per_input: int | None = None,
        inputs: int | Sequence[int] | None = None,
    ) -> None:
        self.where = where
        self.per_input = rollouts_per_input
        self.expected: range | set[int] | None = (
            None if inputs is None else range(inputs) if isinstance(inputs, int) else set(inputs)
        )
        # input id -> its ordinal (first-seen order); its rollouts' line numbers (0: not seen)
        # are lines[ordinal * K + rollout]
        self.ordinals: dict[str, int] = {}
        self.lines = array("q")
        self.seen: dict[tuple[str, int], int] = {}
        self.rollouts: dict[str, set[int]] = {}
        self.indices: dict[int, str] = {}
        # a line number per slot while K is small (a run.json claiming a huge K must not make
        # `rlenv check` allocate K slots per input): else a dict entry per record, as before
        self.dense = rollouts_per_input is not None and rollouts_per_input <= DENSE_ROLLOUTS

    def check(self, number: int, record: dict[str, Any]) -> None:
        """One record of line `number`: a rollout record whose digest matches its content, in
        its place (:meth:`check_key`)."""
        at = f"{self.where}:{number}"
        try:
            input_id = str(record["input_id"])
            rollout = int(record["rollout"])
            index = int(record.get("input_index", 0))
        except (KeyError, TypeError, ValueError):
            raise TamperedRun("not a rollout record", where=at) from None
        stored = record.get("digest")
        if not stored:
            raise TamperedRun("record has no digest", where=at)
        if stored != record_digest(record):
            raise TamperedRun(
                f"record ({input_id!r}, rollout {rollout}) does not match its digest"
                " (its content changed after it was written)",
                where=at,
            )
        self.check_key(number, input_id, rollout, index)

    def check_key(self, number: int, input_id: str, rollout: int, index: int) -> None:
        """The record of line `number` is (input_id, rollout) of input `index`: not a duplicate,
        within the run's rollouts and inputs, and its index names one input only."""
        at = f"{self.where}:{number}"
        per_input = self.per_input
        slot = -1
        if not self.dense:
            first = self.seen.get((input_id, rollout))
        elif per_input is not None and 0 <= rollout < per_input:
            ordinal = self.ordinals.get(input_id)
            slot = -1 if ordinal is None else ordinal * per_input + rollout
            first = (self.lines[slot] or None) if slot >= 0 else None
        else:
            first = None  # an earlier (input_id, rollout) outside K was refused already
        if first is not None:
            raise TamperedRun(
                f"duplicate record ({input_id!r}, rollout {rollout}), first on line {first}",
                where=at,
            )
        if per_input is not None and not 0 <= rollout < per_input:
            raise TamperedRun(
                f"rollout {rollout} of {input_id!r} is outside the run's"
                f" {per_input} rollouts per input",
                where=at,
            )
        if self.expected is not None and index not in self.expected:
            raise TamperedRun(
                f"input index {index} of {input_id!r} is outside the run's"
                f" {len(self.expected)} inputs",
                where=at,
            )
        if self.indices.setdefault(index, input_id) != input_id:
            raise TamperedRun(
                f"input index {index} belongs to {self.indices[index]!r}, not {input_id!r}",
                where=at,
            )
        if not self.dense:
            self.seen[(input_id, rollout)] = number
            self.rollouts.setdefault(input_id, set()).add(rollout)
            return
        assert per_input is not None
        if slot < 0:
            ordinal = self.ordinals.setdefault(input_id, len(self.ordinals))
            if ordinal * per_input >= len(self.lines):
                self.lines.frombytes(bytes(self.lines.itemsize * per_input))
            slot = ordinal * per_input + rollout
        self.lines[slot] = number

    def finish(self) -> None:
        """No gap: every input seen has rollouts 0..K-1, every expected input is there."""
        per_input = self.per_input
        if per_input is not None:
            for input_id, missing, first in self._gaps(per_input):
                if missing:
                    raise TamperedRun(
                        f"input {input_id!r} is missing rollout {first}"
                        f" ({missing} of {per_input} missing)",
                        where=self.where,
                    )
        if self.expected is not None:
            absent = len(self.expected) - len(self.indices)
            if absent:
                if isinstance(self.expected, range):  # in order: the first absent is the least
                    least = next(index for index in self.expected if index not in self.indices)
                else:
                    least = min(self.expected - set(self.indices))
                raise TamperedRun(
                    f"input index {least} is missing ({absent} of {len(self.expected)} inputs"
                    " missing)",
                    where=self.where,
                )

    def _gaps(self, per_input: int) -> Iterator[tuple[str, int, int]]:
        """(input id, rollouts missing, the first missing) of every input seen, in order."""
        if self.dense:
            for input_id, ordinal in self.ordinals.items():
                found = self.lines[ordinal * per_input : (ordinal + 1) * per_input]
                missing = found.count(0)
                yield input_id, missing, found.index(0) if missing else -1
            return
        for input_id, rollouts in self.rollouts.items():
            absent = set(range(per_input)) - rollouts
            yield input_id, len(absent), min(absent) if absent else -1


def expected_inputs(meta: dict[str, Any], summary: dict[str, Any]) -> int | list[int] | None:
    """Which inputs the run covers: run.json's ``input_indices`` (a run of chosen inputs), its
    ``inputs`` count (written since rlenv 0.2), else summary.json's expected rollouts over the
    rollouts per input."""
    if isinstance(meta.get("input_indices"), list):
        return [int(index) for index in meta["input_indices"]]
    if isinstance(meta.get("inputs"), int):
        return int(meta["inputs"])
    expected, per_input = summary.get("expected_rollouts"), meta.get("rollouts_per_input")
    if isinstance(expected, int) and isinstance(per_input, int) and per_input > 0:
        return expected // per_input
    return None


class BaselineRecords(list[CompactRecord]):
    """A ``--baseline`` run's records (compact), with ``source``: the directory as given and
    its run digest (run.json keeps it, so a reader can judge the run again the same way)."""

    source: dict[str, str]


def read_baseline(run_dir: str | Path, fingerprint: str | None) -> BaselineRecords:
    """The records of a ``--baseline`` run directory, read by :func:`read_verified_run` as
    every reader's, in the compact form the metrics read. UserError (one line) when it is not
    a run directory, or not intact, or its env fingerprint differs from ``fingerprint`` (a
    baseline must be the same env: same reward model, same verifiers)."""
    from rlenv.results import compact_for_metrics

    path = Path(run_dir)
    if not (path / "results.jsonl").is_file():
        raise UserError(f"--baseline {path}: no results.jsonl, not a run directory")
    try:
        run = read_verified_run(path)
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
class VerifiedRun:
    """A run directory whose records, summary.json and run.json agree (read_verified_run)."""

    run_dir: Path
    meta: dict[str, Any]
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    """In file order; none torn, none twice, each matching its digest."""


def read_verified_run(run_dir: str | Path, *, resume: bool = False) -> VerifiedRun:
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
        checks = RecordChecks(
            str(results), rollouts_per_input=per_input, inputs=_inputs_of(meta, {})
        )
        for number, record in numbered_records(results):
            checks.check(number, record)
        # verified: now a torn last line (a write cut short by a crash) may be cut off
        return VerifiedRun(path, meta, {}, read_results(results, repair=True))
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
    return VerifiedRun(path, meta, summary, records)


def recompute_summary(
    run_dir: Path,
    meta: dict[str, Any],
    summary: dict[str, Any],
    records: list[dict[str, Any]],
    prepared: Any = None,
) -> dict[str, Any]:
    """summary.json as `rlenv run` would write it from these records and this run.json (the
    same function, ``rlenv.summary.build_summary``, which verifies every record on the way:
    TamperedRun naming results.jsonl's line). The ``--baseline`` the run was judged against
    is read again (verified) from where run.json says, and must still have its digest."""
    from types import SimpleNamespace

    from rlenv.summary import build_summary

    if prepared is None:  # what the summary needs of the env: how many inputs there were
        count = meta.get("inputs")
        if not isinstance(count, int) or isinstance(count, bool):
            expected = expected_inputs(meta, summary)
            count = len(expected) if isinstance(expected, list) else expected or 0
        prepared = SimpleNamespace(inputs=[SimpleNamespace(id=None, data={})] * count)
    try:
        return build_summary(
            prepared,
            {"limit": None, **meta},
            records,
            str((meta.get("model") or {}).get("uri")),
            str(run_dir / "results.jsonl"),
            baseline=baseline_of(meta, run_dir),
        )
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


def _compare_summary(summary: dict[str, Any], recomputed: dict[str, Any], where: Path) -> None:
    """TamperedRun naming the first field (in summary.json's order, dotted path) whose value
    is not the one recomputed from the records."""
    from rlenv.divergence import first_difference

    skipped = set(NOT_RECOMPUTED)
    order = [*FIRST_COMPARED, *recomputed, *summary]  # the digests, then as the summary is built
    keys = [key for key in dict.fromkeys(order) if key not in skipped]
    for key in keys:
        found = first_difference(
            summary.get(key, "<missing>"), recomputed.get(key, "<missing>"), key
        )
        if found:
            field_path, stored, computed = found
            raise TamperedRun(
                f"{field_path} is {_brief(stored)} in summary.json but {_brief(computed)}"
                " recomputed from results.jsonl and run.json",
                where=str(where),
            )


def _brief(value: Any) -> str:
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
        value = parse_json_line(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"not readable JSON: {exc}", where=str(path)) from None
    if not isinstance(value, dict):
        raise UserError("not a JSON object", where=str(path))
    return value


@dataclass
class CheckResult:
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


def check_run(run_dir: str | Path) -> CheckResult:
    """Verify a run directory with :func:`read_verified_run` (what every reader of a run
    checks). Bad input (not a run directory, a file that is not JSON) is a UserError;
    tampering is the problem listed (the first found)."""
    path = Path(run_dir)
    result = CheckResult(str(path))
    try:
        run = read_verified_run(path)
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
            f" {found['field']} ({_brief(found['a'])} vs {_brief(found['b'])})"
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


def check_against(run_dir: str | Path, other: str | Path) -> AgainstResult:
    """Verify both runs (:func:`read_verified_run`; TamperedRun names the first problem), then
    name the first (input, rollout, field) whose outcome differs, else the first model score
    further apart than the tolerance (DESIGN: "The same outcome on any machine")."""
    from rlenv.divergence import first_outcome_difference

    mine, theirs = read_verified_run(run_dir), read_verified_run(other)
    return AgainstResult(
        str(run_dir),
        str(other),
        (run_outcome_digest(mine.records), run_outcome_digest(theirs.records)),
        first_outcome_difference(mine.records, theirs.records),
    )
