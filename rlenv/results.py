"""Run records: the typed record and its statuses, streamed sorted-key JSON lines, the run
digest and the run's outcome digest (rlenv.divergence says where two runs differ).

:class:`RolloutRecord` and :class:`Status` are the contract between the worker that writes a
record, the metrics that score it and the report that shows it (README: "The results record").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Literal, NotRequired, TypedDict, overload

from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.result_lines import (  # re-exported: the results line is part of the record's API
    WrittenLine,
    encode_fields,
    encode_line,
)
from rlenv.result_lines import decode_line as decode_line
from rlenv.results_read import iter_results as iter_results  # re-exported: reading it back
from rlenv.results_read import read_results as read_results


class Status(StrEnum):
    """How a rollout ended. Only ``infra_error`` is left out of the scores (not the model's
    fault); every other status is a model outcome, graded as it is."""

    OK = "ok"
    """The model gave a final answer (graded by the verifiers)."""
    MAX_TURNS = "max_turns"
    """No final answer within ``limits.max_turns`` model turns."""
    TIMEOUT = "timeout"
    """The rollout (policy, tools, verifiers, reward model) exceeded ``limits.timeout_s``:
    stopped by the in-worker alarm or, past a grace, by killing its worker. Not graded; only
    the prompt is kept (``rlenv.worker.lost.lost_record``)."""
    MODEL_ERROR = "model_error"
    """The model answered, but in a form the environment cannot use."""
    INFRA_ERROR = "infra_error"
    """The model endpoint or other infrastructure failed (after retries); excluded from scores."""
    FIXTURE_MISS = "fixture_miss"
    """A tool made a request that was never recorded, and the spec declares no fallback."""
    POLICY_ERROR = "policy_error"
    """A python policy (run inside the frozen world) raised, exited (``sys.exit``), was
    interrupted (``KeyboardInterrupt``), or its worker died under it (``os._exit``, a segfault,
    SIGKILL; also a death between parts, or of a Ray actor under a whole rollout)."""
    TOOL_ERROR = "tool_error"
    """A tool tried to end its process (``SystemExit``, ``KeyboardInterrupt``, any other
    ``BaseException``) or its worker died under it. A tool raising an ``Exception`` is answered
    to the model instead."""
    VERIFIER_ERROR = "verifier_error"
    """A verifier tried to end its process or its worker died under it; the rollout does not
    pass. A verifier raising an ``Exception`` only fails that verifier (``detail``:
    ``verifier error: ...``)."""
    REWARD_ERROR = "reward_error"
    """The reward model tried to end its process; ``reward`` is null. A reward model raising an
    ``Exception`` only sets ``reward_error`` and keeps the status. If its worker died, nothing
    of the rollout is kept and it does not pass.

    A worker's death is never ``infra_error``: env code must not be able to take its rollout
    out of the scores by killing its worker."""


VERIFIER_ERROR = "verifier error: "
"""How a verifier's ``detail`` starts when the verifier itself raised."""


class VerifierRecord(TypedDict):
    """One verifier's verdict on a rollout; ``passed`` is None when it was not graded."""

    name: str
    type: str
    passed: bool | None
    score: float | None
    detail: str | None  # "pending" while deferred to `rlenv grade`, "not sampled" if skipped
    traceback: NotRequired[list[str]]  # the env's frames, when the verifier raised
    state: NotRequired[dict[str, Any]]  # a state verifier's diff (sqlite_state, json_state)


class ToolCallRecord(TypedDict):
    """One tool call the model made, and how the frozen world answered it."""

    turn: int
    id: str
    name: str
    arguments: Any  # the parsed JSON object, or the raw string when it was not valid JSON
    fixture: str  # "hit" | "miss" | "fallback" | "none"
    ok: bool
    error: NotRequired[str]  # the tool itself raised ("TYPE: message"; not a bad call)
    traceback: NotRequired[list[str]]  # the env's frames of that error
    unreachable: NotRequired[bool]  # ... because a connection could not be made


class RolloutRecord(TypedDict):
    """One line of ``results.jsonl``: one rollout of one input."""

    input_id: str
    input_index: int
    rollout: int
    seed: int
    model: str
    status: str  # a Status (a plain str once read back from results.jsonl)
    error: str | None
    messages: list[dict[str, Any]]
    tool_calls: list[ToolCallRecord]
    answer: str | None
    verifiers: list[VerifierRecord]
    passed: bool | None
    reward: float | None
    usage: dict[str, int]
    world: dict[str, Any]
    traceback: NotRequired[list[str]]  # the env's own frames of `error` (innermost last)
    reward_error: NotRequired[str]
    rewards: NotRequired[dict[str, float | None]]  # composite reward: each component + "total"
    reward_traceback: NotRequired[list[str]]
    grading: NotRequired[Literal["pending"]]
    timing: NotRequired[dict[str, Any]]
    logprobs: NotRequired[list[Any]]
    extra: NotRequired[dict[str, Any]]
    kl: NotRequired[dict[str, Any]]
    output: NotRequired[dict[str, Any]]  # {"stdout", "stderr", "truncated"}; not digested
    digest: NotRequired[str]  # added by seal(), and by the writer of results.jsonl


@dataclass(frozen=True)
class HumanLabels:
    """Human judgements of rollouts: scores in [0, 1] by (input_id, rollout), and pairwise
    preferences ``{"input_id", "a", "b", "preferred": "a"|"b"}`` (a, b are rollout indices).
    Read from JSONL by :func:`rlenv.jsonl.load_human`."""

    scores: dict[tuple[str, int], float] = field(default_factory=dict)
    preferences: list[dict[str, Any]] = field(default_factory=list)


VOLATILE_FIELDS = ("timing", "digest", "output")
"""Left out of a record's digest: wall times, the digest itself, and what in-world code
printed (``output``: kept for debugging, not the policy's behaviour; see rlenv.worker.capture)."""


def stable(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record without volatile fields (wall times, its own digest)."""
    return {key: value for key, value in record.items() if key not in VOLATILE_FIELDS}


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 of the record's canonical (RFC 8785) stable form; stored in the record."""
    return sha256_bytes(canonical_bytes(stable(record)))


MODEL_SCORES = ("reward", "rewards", "kl", "logprobs")
"""Fields computed by floating-point models (the reward model, a composite reward's total, KL
to the reference, the policy's logprobs): equal on any machine only within
:data:`SCORE_TOLERANCE`, so they stay out of the outcome digest (DESIGN: "The same outcome
on any machine")."""
SCORE_TOLERANCE = 1e-6
"""How far a model score may differ between machines: relative, or absolute near zero."""


def outcome(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's outcome: its stable form without the model scores (answers, tool calls,
    verdicts, statuses...: identical on any machine for python and replay policies)."""
    return {
        key: value
        for key, value in record.items()
        if key not in VOLATILE_FIELDS and key not in MODEL_SCORES
    }


def outcome_digest(record: Mapping[str, Any]) -> str:
    """sha256 of the record's canonical outcome (:func:`outcome`)."""
    return sha256_bytes(canonical_bytes(outcome(record)))


@overload
def seal(record: RolloutRecord) -> RolloutRecord: ...
@overload
def seal(record: dict[str, Any]) -> dict[str, Any]: ...
def seal(record: RolloutRecord | dict[str, Any]) -> RolloutRecord | dict[str, Any]:
    """Add the record's own digest: where a record is made for a reader other than the results
    file (`rlenv grade`, TRL, a Ray actor); the results file's writer seals every line again
    from what it holds (:func:`encode_record`)."""
    record["digest"] = record_digest(record)
    return record


def order_key(record: Mapping[str, Any]) -> tuple[int, str, int]:
    return (int(record.get("input_index", 0)), str(record["input_id"]), int(record["rollout"]))


class RunDigest:
    """The run digest, fed one record at a time (a few small fields kept per record), so a
    summary can stream results.jsonl once. The one place the run digest is computed."""

    def __init__(self) -> None:
        self._entries: list[tuple[int, str, int, str]] = []

    def add(self, record: Mapping[str, Any]) -> None:
        self._entries.append((*order_key(record), record.get("digest") or record_digest(record)))

    def hexdigest(self) -> str:
        """sha256 over the records' canonical digests in (input, rollout) order."""
        return digest_in_order(entry[3] for entry in sorted(self._entries))


def digest_in_order(digests: Iterable[str]) -> str:
    """The run digest of record digests already in (input index, input id, rollout) order."""
    return sha256_bytes("\n".join(digests).encode())


def input_order(inputs: Iterable[int]) -> Sequence[int]:
    """The input indices sorted, once each; a range stays a range (a list of 10k indices held
    360 kB of the orchestrator for the whole run)."""
    if isinstance(inputs, range) and inputs.step == 1:
        return inputs
    return sorted(set(inputs))


class OrderedDigests:
    """The run digest and the outcome digest (:func:`digest_in_order` of each), fed one record's
    pair at a time in any order. Given the rollouts per input and the run's input indices, an
    input's pairs are hashed (and let go) as soon as it and every input before it are complete,
    so a run that finishes its inputs about in order holds the digests of a few inputs; the
    rest wait for :meth:`hexdigests`, which hashes them in (input index, rollout) order."""

    def __init__(self, rollouts_per_input: int | None = None, inputs: Iterable[int] | None = None):
        self.per_input = rollouts_per_input
        self.order = input_order(inputs) if inputs is not None and rollouts_per_input else []
        self._next = 0
        self._pending: dict[int, list[tuple[int, Any, Any]]] = {}
        self._hashes = (hashlib.sha256(), hashlib.sha256())
        self._started = False
        self.late = False
        """A pair came for an input already hashed: the digests are not the run's (a duplicate
        or a rollout outside K, which the record checks refuse)."""

    def add(self, index: int, rollout: int, digest: Any, outcome: Any) -> None:
        """One record's digest and outcome digest (hex, or packed by :func:`_packed`)."""
        if self._next and index <= self.order[self._next - 1]:
            self.late = True
        self._pending.setdefault(index, []).append((rollout, digest, outcome))
        while self._next < len(self.order):
            entries = self._pending.get(self.order[self._next])
            if entries is None or len(entries) < (self.per_input or 0):
                return
            self._feed(self._pending.pop(self.order[self._next]))
            self._next += 1

    def _feed(self, entries: list[tuple[int, Any, Any]]) -> None:
        entries.sort(key=lambda entry: entry[0])
        for _, *pair in entries:
            for hashed, digest in zip(self._hashes, pair, strict=True):
                if self._started:
                    hashed.update(b"\n")
                hashed.update(unpacked(digest).encode())
            self._started = True

    def hexdigests(self) -> tuple[str, str]:
        """(run digest, outcome digest) of every pair added (call once, at the end)."""
        for index in sorted(self._pending):
            self._feed(self._pending.pop(index))
        return self._hashes[0].hexdigest(), self._hashes[1].hexdigest()


def run_digest(records: Iterable[Mapping[str, Any]]) -> str:
    """sha256 over the records' canonical digests in (input, rollout) order."""
    digest = RunDigest()
    for record in records:
        digest.add(record)
    return digest.hexdigest()


def run_outcome_digest(records: Iterable[Mapping[str, Any]]) -> str:
    """The run's outcome digest: :func:`outcome_digest` of each record, in (input, rollout)
    order, hashed as the run digest is."""
    entries = sorted((*order_key(record), outcome_digest(record)) for record in records)
    return digest_in_order(entry[3] for entry in entries)


TALLIED_FIELDS = frozenset(
    {
        "input_id",
        "input_index",
        "rollout",
        "status",
        "passed",
        "reward",
        "answer",
        "verifiers",
        "tool_calls",
        "usage",
        "timing",
        "grading",
        "error",
        "traceback",
        "reward_error",
        "reward_traceback",
        "kl",
        "rewards",
        "digest",
    }
)
"""What the summary reads of a record (`rlenv.summary._Totals`, :func:`compact_for_metrics`,
:func:`components`): not the messages, the world or the output, most of a line."""

_NOT_OUTCOME = frozenset((*VOLATILE_FIELDS, *MODEL_SCORES))
_NOT_SEALED = frozenset(VOLATILE_FIELDS)


def encode_record(given: Mapping[str, Any]) -> WrittenLine:
    """:func:`encode_line` of `record`, sealed here (its ``digest`` made from its content,
    whatever digest it came with: what the line says is what it holds), with its outcome
    digest and its tallied fields from the same bytes: the line is encoded a field at a time,
    and a field's bytes are its canonical (RFC 8785) bytes too unless they hold a number that
    may be written otherwise (a float, a long run of digits) or a character past U+FFFF (keys
    sort otherwise); only those fields are serialised again, canonically. Anything the fast
    path does not take is sealed by :func:`record_digest`, written by :func:`encode_line` and
    tallied from the line, as before (same bytes either way: tests/test_lines_pinned.py,
    tests/test_canonical_fast.py)."""
    record = given if isinstance(given, dict) else dict(given)
    if "digest" not in record:
        record["digest"] = ""  # made below: a worker's batch sends its records unsealed
    if type(record) is dict:
        try:
            return encode_fields(record, TALLIED_FIELDS, _NOT_OUTCOME, _NOT_SEALED)
        except Exception:  # not a dict of plain JSON: the reference path
            pass
    with contextlib.suppress(Exception):  # what canonical JSON cannot hold keeps its digest
        record["digest"] = record_digest(record)
    line = encode_line(record)
    return WrittenLine(line, line, None)


class ResultsWriter:
    """Appends one sorted-key compact JSON line per finished rollout and flushes it at once.

    Only the digests are canonical (RFC 8785); the line itself need not be byte-canonical.
    """

    def __init__(self, path: Path, on_line: Callable[[WrittenLine], None] | None = None) -> None:
        """`on_line` is given each line once it is written whole (:class:`WrittenLine`)."""
        self.path = path
        self.handle: IO[bytes] = open(path, "ab", buffering=0)
        self.on_line = on_line
        # where the next line starts: this writer is the file's only one (the run directory's
        # lock), so its size is known without asking the file system at every line
        self.size = os.fstat(self.handle.fileno()).st_size

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one line whole, or not at all: a write that fails part-way (disk full) is
        cut back off, so the file never ends in a torn line."""
        self.write_encoded(encode_record(record))

    def write_encoded(self, encoded: WrittenLine) -> None:
        """:meth:`write` of a line :func:`encode_record` made already."""
        whole = encoded.line + b"\n"
        line = memoryview(whole)
        try:
            while line:
                written = self.handle.write(line) or 0
                line = line[written:]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.handle.fileno(), self.size)
            raise
        self.size += len(whole)
        if self.on_line is not None:
            self.on_line(encoded)

    def close(self) -> None:
        try:
            os.fsync(self.handle.fileno())
        finally:
            self.handle.close()


_COMPACT_KEYS = (
    "input_id",
    "input_index",
    "rollout",
    "status",
    "passed",
    "reward",
    "answer",
    "verifiers",
    "components",
)
_COMPACT_KEY_SET = frozenset(_COMPACT_KEYS)


class CompactRecord(Mapping[str, Any]):
    """The few fields of a record the metrics read, read-only, in slots: about a fifth of the
    memory of the same fields in a dict (a summary keeps one per rollout until the end).

    As a mapping it holds what ``compact_for_metrics`` always kept: ``input_id``,
    ``input_index``, ``rollout``, ``status``, ``passed``, ``reward``, ``answer``,
    ``verifiers`` and ``components``; ``usage`` (``{"completion_tokens": N}``) when N is not
    0, ``kl`` and ``rewards`` when the record has them. ``digest`` (the record's own, packed:
    :func:`unpacked` reads it) and ``outcome`` (its :func:`outcome_digest`, packed too) are
    attributes, not keys.
    """

    __slots__ = (*_COMPACT_KEYS, "tokens", "kl", "rewards", "digest", "outcome")

    input_id: str
    input_index: int
    rollout: int
    status: Any
    passed: Any
    reward: Any
    answer: Any
    verifiers: list[dict[str, Any]]
    components: tuple[tuple[str, ...], Sequence[dict[str, Any]]]
    tokens: Any
    kl: Any
    rewards: Any
    digest: Any
    outcome: Any

    def get(self, key: str, default: Any = None) -> Any:
        if key in _COMPACT_KEY_SET:
            return getattr(self, key)
        value = self._optional(key)
        return default if value is None else value

    def _optional(self, key: str) -> Any:
        if key == "usage":
            return {"completion_tokens": self.tokens} if self.tokens else None
        if key == "kl" or key == "rewards":
            return getattr(self, key)
        return None

    def __getitem__(self, key: str) -> Any:
        if key in _COMPACT_KEY_SET:
            return getattr(self, key)
        value = self._optional(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in _COMPACT_KEY_SET or (isinstance(key, str) and self._optional(key) is not None)

    def __iter__(self) -> Iterator[str]:
        yield from _COMPACT_KEYS
        for key in ("usage", "kl", "rewards"):
            if self._optional(key) is not None:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"CompactRecord({dict(self)!r})"


def compact_for_metrics(
    record: Mapping[str, Any], shared: dict[Any, Any], outcome: str | None = None
) -> CompactRecord:
    """The few fields the metrics read (:class:`CompactRecord`), with repeated strings, verifier
    lists, exercised parts and failures shared through `shared` (one dict per run). `outcome`
    is the record's :func:`outcome_digest` when it is known already (:func:`encode_record`);
    `record` need then hold only the :data:`TALLIED_FIELDS`."""

    def text(value: Any) -> Any:  # strings only: 1, 1.0 and True are equal keys
        return shared.setdefault(value, value) if type(value) is str else value

    verifiers = tuple((v.get("name"), v.get("passed")) for v in record.get("verifiers") or [])
    key = ("verifiers", verifiers)
    if key not in shared:
        shared[key] = [{"name": name, "passed": passed} for name, passed in verifiers]
    compact = CompactRecord()
    compact.input_id = text(str(record["input_id"]))
    compact.input_index = int(record.get("input_index", 0))
    compact.rollout = int(record["rollout"])
    compact.status = text(record.get("status"))
    compact.passed = record.get("passed")
    compact.reward = record.get("reward")
    compact.answer = text(record.get("answer"))  # answers repeat (collapse, short answers)
    compact.verifiers = shared[key]
    ran, failed = components(record)
    ran = shared.setdefault(("ran", ran), ran)
    if failed:
        compact.components = (ran, tuple(_shared_failure(failure, shared) for failure in failed))
    else:
        compact.components = shared.setdefault(("components", ran), (ran, ()))
    compact.tokens = (record.get("usage") or {}).get("completion_tokens")
    compact.kl = record.get("kl")
    compact.rewards = record.get("rewards")
    compact.digest = _packed(record.get("digest"))
    compact.outcome = _packed(outcome_digest(record) if outcome is None else outcome)
    return compact


def _packed(digest: Any) -> Any:
    """A sha256 hex digest as its 32 bytes (half the memory of the text); anything else as it
    is. :func:`unpacked` gives the text back."""
    if isinstance(digest, str) and len(digest) == 64:
        try:
            packed = bytes.fromhex(digest)
        except ValueError:
            return digest
        if packed.hex() == digest:
            return packed
    return digest


def unpacked(digest: Any) -> Any:
    """A digest kept by :func:`compact_for_metrics` (CompactRecord.digest), as written."""
    return digest.hex() if isinstance(digest, bytes) else digest


def _shared_failure(failure: dict[str, Any], shared: dict[Any, Any]) -> dict[str, Any]:
    """One object per distinct failure of :func:`components` (an endpoint that is down fails
    every rollout with the same error and traceback)."""
    try:
        key = ("failure", failure["component"], failure["error"], tuple(failure["traceback"]))
        return shared.setdefault(key, failure)  # type: ignore[no-any-return]
    except TypeError:  # an unhashable error: kept as it is
        return failure


# the component a rollout's status blames (tool_error and verifier_error name theirs)
_STATUS_COMPONENT = {
    Status.INFRA_ERROR: "endpoint",
    Status.POLICY_ERROR: "policy",
    Status.MODEL_ERROR: "model output",
    Status.TIMEOUT: "timeout",
    Status.FIXTURE_MISS: "fixtures",
}


def components(record: Mapping[str, Any]) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """Which parts of the env a rollout exercised, and which of them failed, with the error.

    Parts: ``endpoint`` (every rollout), ``policy``, ``model output``, ``timeout`` and
    ``fixtures`` (every rollout the endpoint answered), ``tool NAME`` (once per call),
    ``verifier NAME`` (each graded verifier) and ``reward model`` (each rollout it scored).
    A failure is ``{"component", "error", "traceback"}``: the record's status blames one
    part; a tool that raised, a verifier whose detail is a verifier error and a reward error
    blame theirs.
    """
    status = record.get("status")
    ran = ["endpoint"]
    failed: list[dict[str, Any]] = []

    def fail(component: str, error: Any, frames: Any) -> None:
        failed.append({"component": component, "error": error, "traceback": list(frames or [])})

    error, frames = record.get("error"), record.get("traceback")
    if status == Status.INFRA_ERROR:
        fail("endpoint", error, frames)
        return tuple(ran), failed
    ran += ["policy", "model output", "timeout", "fixtures"]
    if status in _STATUS_COMPONENT:
        fail(_STATUS_COMPONENT[Status(status)], error, frames)
    for call in record.get("tool_calls") or []:
        ran.append(f"tool {call.get('name')}")
        if call.get("error") is not None:
            fail(f"tool {call.get('name')}", call["error"], call.get("traceback"))
    if status == Status.TOOL_ERROR:  # the call that crashed is not in tool_calls
        ran.append(_named(error, "tool"))
        fail(ran[-1], error, frames)
    for verifier in record.get("verifiers") or []:
        if verifier.get("passed") is None:
            continue
        ran.append(f"verifier {verifier.get('name')}")
        if str(verifier.get("detail") or "").startswith(VERIFIER_ERROR):
            fail(ran[-1], verifier["detail"], verifier.get("traceback"))
    if status == Status.VERIFIER_ERROR:
        ran.append(_named(error, "verifier"))
        fail(ran[-1], error, frames)
    if record.get("reward") is not None or record.get("reward_error"):
        ran.append("reward model")
        if record.get("reward_error"):
            fail("reward model", record["reward_error"], record.get("reward_traceback"))
    return tuple(ran), failed


def _named(error: Any, kind: str) -> str:
    """``tool NAME`` from an error ``tool NAME: TYPE: message`` (``tool ?`` if not so)."""
    text = str(error or "")
    if text.startswith(f"{kind} ") and ": " in text:
        return text.split(": ", 1)[0]
    return f"{kind} ?"
