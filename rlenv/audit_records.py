"""The run-integrity reader: a run's records read while each one's digest is recomputed from
its content, and duplicates and gaps refused (:func:`audited_records`). `rlenv check` (in
`rlenv.audit`), the summary, `rlenv run --resume` and its `--baseline`, `grade`, `report` and
`compare` all read through it; it sits below the runner so the runner need not reach up to
the API layer for it.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from rlenv.errors import UserError
from rlenv.results import RolloutRecord, record_digest


class TamperedRun(UserError):
    """A run directory whose records or summary do not match what they claim (exit 2 for the
    commands that read a run, exit 1 for `rlenv check`)."""


def numbered_records(path: Path) -> Iterator[tuple[int, RolloutRecord]]:
    """(line number, record) of results.jsonl, stopping at a torn last line (a crash
    mid-write; `--resume` cuts it off). A malformed line elsewhere is an error. Each JSON
    object is typed as the record it claims to be: :class:`RecordAudit` checks the claim."""
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
        yield number, cast(RolloutRecord, record)


def audited_records(
    records: Iterable[tuple[int, RolloutRecord]],
    where: str,
    *,
    rollouts_per_input: int | None = None,
    inputs: int | Sequence[int] | None = None,
) -> Iterator[RolloutRecord]:
    """The records, each checked as it passes: its stored digest is recomputed from its
    content, and no (input, rollout) comes twice. When the iteration ends, every input has
    rollouts 0..K-1 (K = ``rollouts_per_input``) and, given ``inputs``, every input index
    0..inputs-1 (or every index of a list: a run of chosen inputs) is there. TamperedRun
    names ``where:LINE`` (or ``where`` for a gap)."""
    audit = RecordAudit(where, rollouts_per_input=rollouts_per_input, inputs=inputs)
    for number, record in records:
        audit.admit(number, record)
        yield record
    audit.finish()


DENSE_ROLLOUTS = 1024
"""Up to this many rollouts per input, :class:`RecordAudit` keeps 8 bytes per (input, rollout)
slot (at most 8 KiB per input id a file names, a small multiple of its record's own size)."""


class RecordAudit:
    """What :func:`audited_records` checks, one record at a time, keeping a few bytes per
    record (a line number per (input, rollout) slot, one entry per input), so a 100k-rollout
    run is checked in little memory. :meth:`admit` a whole record (its digest recomputed), or
    :meth:`admit_key` only its place in the run (a record whose digest was sealed where it was
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

    def admit(self, number: int, record: Mapping[str, Any]) -> None:
        """One record of line `number`: a rollout record whose digest matches its content, in
        its place (:meth:`admit_key`)."""
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
        self.admit_key(number, input_id, rollout, index)

    def admit_key(self, number: int, input_id: str, rollout: int, index: int) -> None:
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
