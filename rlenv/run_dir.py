"""The run directory: its lock (one writer), opening it or reopening it for `--resume` (whose
run.json must match the settings given now, field by field), setting aside the records
`--retry-errors` runs again, and leaving nothing behind when a new run ends before a rollout.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlenv.audit_reader import read_audited_run
from rlenv.canonical import canonical_bytes, indented_json
from rlenv.clock import wall_now
from rlenv.errors import RunFailed, UserError
from rlenv.files import atomic_write
from rlenv.results import (
    RolloutRecord,
    read_results,
)
from rlenv.version import __version__

RETRIED_FILE = "retried.jsonl"
"""Where `--retry-errors` keeps the records it replaced (nothing from a run is thrown away)."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[-48:] or "model"


def default_run_dir(env_name: str, model: str, root: Path = Path("runs")) -> Path:
    stamp = wall_now().strftime("%Y%m%d-%H%M%S")
    base = root / env_name / f"{stamp}-{_slug(model.split(':', 1)[-1])}"
    candidate, number = base, 1
    while candidate.exists():
        number += 1
        candidate = Path(f"{base}-{number}")
    return candidate


def _pretty(value: Any) -> bytes:
    """run.json and summary.json: `value` as canonical JSON reads back (no NaN), indented."""
    return (indented_json(json.loads(canonical_bytes(value)), finite=True) + "\n").encode()


@contextmanager
def _writes_to(run_dir: Path) -> Iterator[None]:
    """A write into the run directory that fails (disk full, quota, file size limit) ends the
    run with exit code 1 and one line; the finished rollouts stay for --resume."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None and not str(exc.filename).startswith(str(run_dir)):
            raise
        if exc.filename is None and exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        raise RunFailed(
            f"cannot write to {run_dir}: {exc.strerror}; the finished rollouts are kept:"
            " make room and continue with --resume"
        ) from None


def _discard_if_empty(run_dir: Path, created: bool) -> None:
    """A new run that ends before its first rollout is finished leaves nothing behind (no
    run.json blocking the next `run` on this --out); one with rollouts stays for --resume."""
    results = run_dir / "results.jsonl"
    try:
        if read_results(results):
            return
        for name in ("results.jsonl", "run.json"):
            (run_dir / name).unlink(missing_ok=True)
        if created:
            (run_dir / LOCK_NAME).unlink(missing_ok=True)
            run_dir.rmdir()
    except OSError:
        pass


LOCK_NAME = ".rlenv.lock"
# run.json fields that do not change results: where the spec file lives, where rollouts ran and
# which isolation mechanisms the machine offers (the digest is the same under all of them)
_RESUME_FREE = frozenset({"spec", "executor", "world", "group_by", "base_url_history"})
# ... and inside `model`: the endpoint's URL (a model served elsewhere is the same model)
_RESUME_FREE_MODEL = frozenset({"base_url"})


@contextmanager
def _run_dir_lock(run_dir: Path, resume: bool) -> Iterator[int | None]:
    """Hold RUN_DIR/.rlenv.lock for the whole run: one writer per run directory.

    A second `run` or `--resume` on the directory while it is held is a user error, and it
    changes nothing there (the lock is an flock: it dies with its holder, even on SIGKILL).
    Yields the lock file's descriptor: a process given it holds the lock until it exits too
    (rlenv.results_aside's writer, which may still be appending after the run's own death).
    """
    from filelock import FileLock, Timeout

    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--out {run_dir} exists and is not a directory")
    if resume and not (run_dir / "run.json").is_file():
        raise UserError(f"--resume: {run_dir} holds no run to resume (no run.json)")
    if not resume and (run_dir / "run.json").exists() and not (run_dir / LOCK_NAME).exists():
        _refuse_earlier_run(run_dir)  # before the lock file is added to it
    lock = FileLock(run_dir / LOCK_NAME, timeout=0, preserve_lock_file=True)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:  # before OSError: filelock's Timeout is a TimeoutError
        raise UserError(
            f"--out {run_dir} is in use by another rlenv run (it holds {LOCK_NAME});"
            " wait for it to finish or choose another directory"
        ) from None
    except OSError as exc:
        raise UserError(
            f"--out {run_dir}: cannot create the run directory: {exc.strerror}"
        ) from None
    try:
        yield getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    finally:
        lock.release()


def _first_difference(earlier: Any, now: Any, path: str = "") -> str | None:
    """The dotted name of the first field where two JSON values differ, in the order the
    current run's settings are listed (a changed --limit is named before the input count it
    implies), then any field only the earlier run had."""
    if isinstance(earlier, dict) and isinstance(now, dict):
        for key in [*now, *(key for key in earlier if key not in now)]:
            if not path and key in _RESUME_FREE:
                continue
            if path == "model." and key in _RESUME_FREE_MODEL:
                continue
            found = _first_difference(earlier.get(key), now.get(key), f"{path}{key}.")
            if found:
                return found
        return None
    if canonical_bytes(earlier) != canonical_bytes(now):
        return path.rstrip(".") or "run.json"
    return None


def _open_run_dir(
    run_dir: Path, meta: dict[str, Any], resume: bool, retry: tuple[str, ...] = ()
) -> set[tuple[str, int]]:
    """Create the run directory, or reopen it for --resume; never overwrite an earlier run.

    On resume, records whose status is in `retry` move to retried.jsonl (their rollouts run
    again), and a new base URL is added to run.json's `base_url_history`.
    """
    results = run_dir / "results.jsonl"
    meta_path = run_dir / "run.json"
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--out {run_dir} exists and is not a directory")
    if resume:
        if not meta_path.is_file():
            raise UserError(f"--resume: {run_dir} holds no run to resume (no run.json)")
        try:
            earlier = json.loads(meta_path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise UserError(f"--resume: {meta_path} is not readable JSON: {exc}") from None
        now = {  # as JSON, in the order the settings are listed
            key: json.loads(canonical_bytes(value))
            for key, value in {**meta, "rlenv_version": __version__}.items()
        }
        changed = _first_difference(earlier, now)
        if changed:
            raise UserError(
                f"--resume: {run_dir} was started with a different {changed}"
                f" ({_short(earlier, changed)} then, {_short(now, changed)} now);"
                " results would mix settings: use another --out"
            )
        records = read_audited_run(run_dir, resume=True).records
        if retry:
            records = _set_aside(run_dir, records, retry)
        _note_base_url(meta_path, earlier, now)
        return {(str(record["input_id"]), int(record["rollout"])) for record in records}
    if run_dir.exists() and any(entry.name != LOCK_NAME for entry in run_dir.iterdir()):
        _refuse_earlier_run(run_dir)
    try:
        atomic_write(meta_path, _pretty({**meta, "rlenv_version": __version__}))
        results.touch()
    except OSError as exc:
        meta_path.unlink(missing_ok=True)
        raise UserError(
            f"--out {run_dir}: cannot write the run directory: {exc.strerror}"
        ) from None
    return set()


def _refuse_earlier_run(run_dir: Path) -> None:
    raise UserError(
        f"--out {run_dir} already holds a run; pass --resume to continue it or choose another"
        " directory"
    )


def _set_aside(
    run_dir: Path, records: list[RolloutRecord], retry: tuple[str, ...]
) -> list[RolloutRecord]:
    """Move the records to retry from results.jsonl to retried.jsonl; return those kept.

    retried.jsonl is appended (and flushed) first, then results.jsonl is replaced atomically:
    a crash in between leaves a record in both files, never in neither.
    """
    from rlenv.results import encode_line

    again = [record for record in records if record.get("status") in retry]
    if not again:
        return records
    kept = [record for record in records if record.get("status") not in retry]
    with open(run_dir / RETRIED_FILE, "ab") as handle:
        handle.write(b"".join(encode_line(record) + b"\n" for record in again))
        handle.flush()
        os.fsync(handle.fileno())
    atomic_write(
        run_dir / "results.jsonl", b"".join(encode_line(record) + b"\n" for record in kept)
    )
    return kept


def _note_base_url(meta_path: Path, earlier: dict[str, Any], now: dict[str, Any]) -> None:
    """run.json: the model's base URL is the latest, `base_url_history` every one used (as
    `public_url` wrote them: no credentials)."""
    old = (earlier.get("model") or {}).get("base_url")
    new = (now.get("model") or {}).get("base_url")
    if old == new:
        return
    history = list(earlier.get("base_url_history") or [old])
    if new not in history:
        history.append(new)
    updated = {**earlier, "model": {**earlier["model"], "base_url": new}}
    updated["base_url_history"] = history
    atomic_write(meta_path, _pretty(updated))


def _short(document: Any, dotted: str) -> str:
    """A field's value for a message (JSON, cut to 40 characters)."""
    value = document
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
