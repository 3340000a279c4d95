"""`rlenv run`: every held-out input x K rollouts, scored, streamed to a run directory."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import functools
import gc
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.agent import RolloutTimeout, ToolOutcome, Trajectory, rollout_loop
from rlenv.canonical import canonical_bytes
from rlenv.check import RecordChecks, TamperedRun, read_baseline
from rlenv.clock import monotonic, wall_now
from rlenv.env import Environment, Purpose, load_environment, policy_sources
from rlenv.errors import InfraError, RunFailed, UserError, WorkerLost
from rlenv.executors import Executor, check_executor, make_executor
from rlenv.files import atomic_write, default_cache_dir, usable_out
from rlenv.inputs import InputRecord, select
from rlenv.providers.base import ModelReply, ModelRequest, Provider, check_reference
from rlenv.providers.registry import resolve_provider
from rlenv.results import (
    CompactRecord,
    ResultsWriter,
    compact_for_metrics,
    decode_line,
    digest_in_order,
    iter_results,
    read_results,
    unpacked,
)
from rlenv.seeding import derive_seed
from rlenv.spec import MAX_ROLLOUTS
from rlenv.version import __version__
from rlenv.worker import (
    GC_THRESHOLD,
    RolloutTask,
    WorkerConfig,
    lost_record,
    timeout_message,
    tool_schemas,
)

DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 1024  # rollouts in flight at most (workers: min(concurrency, cores))
MAX_LIMIT = 1_000_000_000
MAX_BATCH = 64  # in-world rollouts sent to a worker in one request, at most


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]

    @property
    def digest(self) -> str:
        return str(self.summary["digest"])

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The flags that say the run could not produce the scores it promises (exit 1)."""
        return [flag for flag in self.summary.get("flags") or [] if flag.get("fails_run")]


RETRYABLE = ("infra_error", "timeout")
"""Statuses `--resume --retry-errors` may run again (the model's outcomes are never retried)."""
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
    return (
        json.dumps(json.loads(canonical_bytes(value)), indent=2, ensure_ascii=False) + "\n"
    ).encode()


def _fewer_collections(function: Callable[..., RunResult]) -> Callable[..., RunResult]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> RunResult:
        saved = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLD)
        try:
            return function(*args, **kwargs)
        finally:
            gc.set_threshold(*saved)

    return wrapper


@_fewer_collections
def run(
    spec_path: str | Path,
    *,
    model: str | None = None,
    rollouts: int | None = None,
    limit: int | None = None,
    out: str | Path | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    resume: bool = False,
    base_url: str | None = None,
    runs_root: Path = Path("runs"),
    progress: Callable[[int, int], None] | None = None,
    record_dir: Path | None = None,
    service_routes: dict[str, str] | None = None,
    reference: str | None = None,
    expensive_fraction: float = 1.0,
    defer_expensive: bool = False,
    grader_cache: bool | Path = True,
    executor: str = "local",
    address: str | None = None,
    ids: list[str] | None = None,
    where: dict[str, str] | None = None,
    group_by: str | None = None,
    baseline: str | Path | None = None,
    retry: Iterable[str] = (),
    retries: int | None = None,
    request_timeout: float | None = None,
    allow_weak_sandbox: bool = False,
) -> RunResult:
    """Run an env against a model; return the run directory and its summary.

    `executor` is "local" (worker processes on this machine) or "ray" (actors on the Ray cluster
    at `address`: "auto", HOST:PORT or ray://HOST:PORT; default a new local Ray instance); both
    give the same results.

    `baseline` is a reference run directory of the same env (e.g. the SFT checkpoint): failing
    rollouts scored above its passing answers are reward-hacking suspects too (summary only).

    With `record_dir` (used by `rlenv record`) tools reach the live network through recording
    cassettes in that directory, one worker at a time (vcrpy is not safe to share);
    `service_routes` (logical host -> real HOST:PORT) is where the spec's services are running.

    `ids` and `where` choose inputs (by id; by field values), before `limit`; `group_by` names
    an input field whose values split the summary's pass rate and reward (``groups``).

    With `resume`, `retry` names statuses (of :data:`RETRYABLE`) whose rollouts run again;
    their earlier records move to RUN_DIR/retried.jsonl. `base_url` may differ on resume (it
    is infrastructure, not the model): run.json keeps every base URL used, without
    credentials. `retries` and `request_timeout` tune an API model's (openai:) client.

    `allow_weak_sandbox` (or RLENV_ALLOW_WEAK_SANDBOX=1) lets code verifiers run with resource
    limits only where no namespace sandbox works; there it changes results, so run.json records
    it (and `--resume` must give it again).
    """
    retry = tuple(sorted(set(retry)))
    _check_options(concurrency, executor, address, rollouts, limit, expensive_fraction)
    if model and reference:  # a mismatched pair is said before the env is even loaded
        check_reference(model, reference)
    _check_retry(retry, resume)
    purpose: Purpose = "record" if record_dir is not None else "run"
    # the checks that import the env's modules run in the workers, which import them anyway
    world_checks = {"purpose": purpose, "model": model, "defer_expensive": defer_expensive}
    prepared = load_environment(
        spec_path,
        purpose=purpose,
        model=model,
        defer_expensive=defer_expensive,
        world_checks="workers",
    )
    spec = prepared.loaded.spec
    provider, model_uri, reference = _resolve_policy(
        prepared, model, reference, base_url, concurrency, retries, request_timeout
    )
    base = read_baseline(baseline, prepared.fingerprint) if baseline is not None else None
    rollouts_per_input = rollouts or spec.rollouts
    if check_inputs := getattr(provider, "check_inputs", None):  # replay: lines for no rollout
        check_inputs(prepared.inputs, rollouts_per_input)
    inputs = select(prepared.inputs, ids=ids, where=where, limit=limit)
    run_dir = Path(out) if out else default_run_dir(spec.name, model_uri, runs_root)
    world = world_modes(executor)  # probed now, while this process is small (the probes fork it)
    meta: dict[str, Any] = {
        "env": {"name": spec.name, "version": spec.version, "fingerprint": prepared.fingerprint},
        "model": _model_identity(prepared, provider, model_uri),
        "decoding": spec.decoding.model_dump(),
        "rollouts_per_input": rollouts_per_input,
        "limit": limit,
        # only for chosen inputs: run.json of an ordinary run stays as it was
        **(
            {
                "select": {"ids": ids or None, "where": where or None},
                "input_indices": [record.index for record in inputs],
            }
            if ids or where
            else {}
        ),
        "inputs": len(inputs),
        "reference": reference,
        "spec": str(prepared.loaded.path),
        "world": world,
        "expensive_fraction": expensive_fraction,
        "deferred_expensive": defer_expensive,
        "executor": executor,
    }
    if group_by:
        meta["group_by"] = group_by
    created = not usable_out(run_dir).exists()
    weak = allow_weak_sandbox or weak_sandbox_allowed()
    if weak and world["sandbox"] == "rlimits":
        meta["allow_weak_sandbox"] = True
    if prepared.calibration is not None:
        # only with a calibration beside the reward model: other runs' run.json stay as they were
        meta["reward_calibration"] = prepared.calibration
    with _run_dir_lock(run_dir, resume):
        done = _open_run_dir(run_dir, meta, resume, retry)
        tasks = _pending_tasks(inputs, rollouts_per_input, done)
        total = len(inputs) * rollouts_per_input
        results = run_dir / "results.jsonl"
        earlier = results.stat().st_size if results.exists() else 0  # --resume: a run's lines
        written = _Totals()  # what this process appends, tallied as it is written
        try:
            with _writes_to(run_dir):
                work_root = Path(tempfile.mkdtemp(prefix="rlenv-work-", dir=_work_parent()))
                try:
                    config = _worker_config(
                        prepared, provider, work_root, record_dir, meta, grader_cache
                    )
                    config.service_routes = dict(service_routes or {})
                    config.world_checks = world_checks
                    config.allow_weak_sandbox = weak
                    _run_tasks(
                        prepared,
                        provider,
                        tasks,
                        config,
                        results,
                        kind=executor,
                        address=address,
                        concurrency=1 if record_dir is not None else concurrency,
                        advance=lambda n: progress(len(done) + n, total) if progress else None,
                        on_line=written.add_line,
                    )
                finally:
                    shutil.rmtree(work_root, ignore_errors=True)
                # only the lines that were there before are read again (and their digests
                # recomputed): those this process wrote were tallied as they were written
                summary = build_summary(
                    prepared,
                    meta,
                    iter_results(results, end=earlier),
                    model_uri,
                    str(results),
                    baseline=base,
                    written=written,
                )
                atomic_write(run_dir / "summary.json", _pretty(summary))
        except BaseException:
            if not resume:
                _discard_if_empty(run_dir, created)
            raise
    return RunResult(run_dir, summary)


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
def _run_dir_lock(run_dir: Path, resume: bool) -> Iterator[None]:
    """Hold RUN_DIR/.rlenv.lock for the whole run: one writer per run directory.

    A second `run` or `--resume` on the directory while it is held is a user error, and it
    changes nothing there (the lock is an flock: it dies with its holder, even on SIGKILL).
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
        yield
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


def weak_sandbox_allowed() -> bool:
    """RLENV_ALLOW_WEAK_SANDBOX=1 is set (the same as --allow-weak-sandbox)."""
    from rlenv.verifiers.code import WEAK_SANDBOX_VARIABLE

    return os.environ.get(WEAK_SANDBOX_VARIABLE) == "1"


def _check_options(
    concurrency: int,
    executor: str,
    address: str | None,
    rollouts: int | None,
    limit: int | None,
    expensive_fraction: float,
) -> None:
    """The user errors `run` can find in its arguments alone, before any run directory."""
    if concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    check_executor(executor, address)
    if rollouts is not None and not 1 <= rollouts <= MAX_ROLLOUTS:
        raise UserError(f"--rollouts must be between 1 and {MAX_ROLLOUTS}")
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise UserError(f"--limit must be between 1 and {MAX_LIMIT}")
    if concurrency > MAX_CONCURRENCY:
        raise UserError(f"--concurrency must be at most {MAX_CONCURRENCY}")
    if not 0 <= expensive_fraction <= 1:
        raise UserError("--expensive-fraction must be between 0 and 1")


def _model_identity(prepared: Environment, provider: Provider, model_uri: str) -> dict[str, Any]:
    """The provider's identity, plus the source hashes of a python policy (its module and the
    helpers it imports beside the spec): editing the policy changes the model, not the env."""
    identity = dict(provider.identity())
    sources = policy_sources(prepared.loaded, model_uri)
    if sources:
        identity["sources"] = sources
    return identity


def _check_retry(retry: tuple[str, ...], resume: bool) -> None:
    """--retry-errors names retryable statuses, and only continues a run (--resume)."""
    if not retry:
        return
    unknown = [status for status in retry if status not in RETRYABLE]
    if unknown:
        raise UserError(
            f"retry: {unknown[0]!r} is not retryable; choose from {', '.join(RETRYABLE)}"
        )
    if not resume:
        flag = "--retry-errors" if "infra_error" in retry else "--retry-timeouts"
        raise UserError(f"{flag} re-runs rollouts of an earlier run: add --resume --out DIR")


def _resolve_policy(
    prepared: Environment,
    model: str | None,
    reference: str | None,
    base_url: str | None,
    concurrency: int,
    retries: int | None = None,
    request_timeout: float | None = None,
) -> tuple[Provider, str, str | None]:
    """The policy's provider, its model URI and the KL reference (argument or spec)."""
    spec = prepared.loaded.spec
    if model is not None and not model.strip():
        raise UserError("--model is empty: pass a model URI or leave it out for the spec's")
    model_uri = model or spec.model
    if not model_uri:
        raise UserError("no model: pass --model URI or set 'model' in the spec")
    reference = reference or spec.reference
    check_reference(model_uri, reference)
    api = model_uri.startswith("openai:")
    if not api and (retries is not None or request_timeout is not None):
        option = "--retries" if retries is not None else "--request-timeout"
        raise UserError(f"{option} is for API models (openai:), not {model_uri.split(':')[0]}:")
    if retries is not None and retries < 0:
        raise UserError("--retries must be at least 0")
    if request_timeout is not None and not request_timeout > 0:
        raise UserError("--request-timeout must be more than 0 seconds")
    options: dict[str, Any] | None = None
    if reference:
        options = {"reference": reference}
    elif api:
        options = {"max_connections": max(256, concurrency), "pools": max(1, concurrency // 8)}
        if retries is not None:
            options["max_retries"] = retries
        if request_timeout is not None:
            options["request_timeout"] = request_timeout
    return resolve_provider(model_uri, base_url=base_url, options=options), model_uri, reference


def _worker_config(
    prepared: Environment,
    provider: Provider,
    work_root: Path,
    record_dir: Path | None,
    meta: dict[str, Any],
    grader_cache: bool | Path,
) -> WorkerConfig:
    """What every worker is started with (the in-world policy, if any, and the endpoints the
    network guard lets through: an HTTP policy's, an HTTP reward model's)."""
    return WorkerConfig(
        spec_path=str(prepared.loaded.path),
        work_root=str(work_root),
        model_uri=provider.uri if provider.in_world else None,
        allowed_endpoints=list(getattr(provider, "endpoints", lambda: [])())
        + prepared.reward_endpoints,
        live_tools=record_dir is not None,
        record_dir=str(record_dir) if record_dir is not None else None,
        expensive_fraction=meta["expensive_fraction"],
        defer_expensive=meta["deferred_expensive"],
        cache_dir=_cache_dir(grader_cache),
        empty_workdir=prepared.loaded.snapshot_path is None,
    )


def _pending_tasks(
    inputs: list[InputRecord], rollouts_per_input: int, done: set[tuple[str, int]]
) -> list[RolloutTask]:
    """Every (input, rollout) of the run not already in results.jsonl, in order."""
    return [
        RolloutTask(record.index, rollout)
        for record in inputs
        for rollout in range(rollouts_per_input)
        if (record.id, rollout) not in done
    ]


def _run_tasks(
    prepared: Environment,
    provider: Provider,
    tasks: list[RolloutTask],
    config: WorkerConfig,
    results_path: Path,
    *,
    kind: str,
    address: str | None,
    concurrency: int,
    advance: Callable[[int], None],
    on_line: Callable[[bytes], None] | None = None,
) -> None:
    """Start the workers, run the tasks `concurrency` at a time, append each record (and give
    its line to `on_line`)."""
    writer = ResultsWriter(results_path, on_line)
    try:
        if tasks:
            executor = make_executor(kind, config, min(concurrency, len(tasks)), address)
            try:
                asyncio.run(
                    _execute(prepared, provider, executor, tasks, concurrency, writer, advance)
                )
            finally:
                executor.close()
    finally:
        writer.close()


def _cache_dir(grader_cache: bool | Path) -> str | None:
    if grader_cache is False:
        return None
    return str(default_cache_dir() if grader_cache is True else grader_cache)


def _work_parent() -> str | None:
    """Where rollout snapshot copies live; `verify --perturb` moves them to another filesystem
    (tmpfs lists entries in reverse creation order, ext4 in hash order)."""
    if os.environ.get("RLENV_PERTURB_LISTING") == "reverse" and os.path.isdir("/dev/shm"):
        return "/dev/shm"
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
        records = read_results(results, repair=True)
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
    run_dir: Path, records: list[dict[str, Any]], retry: tuple[str, ...]
) -> list[dict[str, Any]]:
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


async def _execute(
    prepared: Environment,
    provider: Provider,
    executor: Executor,
    tasks: list[RolloutTask],
    concurrency: int,
    writer: ResultsWriter,
    advance: Callable[[int], None],
) -> None:
    queue: Iterator[RolloutTask] = iter(tasks)
    finished = 0
    timeout_s = prepared.loaded.spec.limits.timeout_s

    def done(task: RolloutTask, record: dict[str, Any] | WorkerLost, started: float) -> None:
        nonlocal finished
        if isinstance(record, WorkerLost):  # killed for overrunning, or died: the run goes on
            # (a call's limit may be what was left of the rollout's: name the spec's)
            lost = record
            error = timeout_message(timeout_s) if lost.status == "timeout" else lost.error
            record = lost_record(
                prepared.loaded, prepared.inputs, task, provider.uri, lost.status, error
            )
        record.setdefault("timing", {})["wall_s"] = round(monotonic() - started, 6)
        writer.write(record)
        finished += 1
        advance(finished)

    async def consumer() -> None:
        for task in queue:
            started = monotonic()
            try:
                record = await _outside_rollout(prepared, provider, executor, task)
            except WorkerLost as lost:
                done(task, lost, started)
            else:
                done(task, record, started)

    pending = collections.deque(tasks)

    async def batches() -> None:
        """In-world rollouts go to a worker many at a time (one request, an answer per
        rollout); what a lost worker did not reach is queued again."""
        while pending:
            size = max(1, min(MAX_BATCH, len(pending) // (2 * workers)))
            batch = [pending.popleft() for _ in range(min(size, len(pending)))]
            started = monotonic()
            async with contextlib.aclosing(executor.run_batch(batch, timeout_s)) as answers:
                async for task, record in answers:
                    if record is None:
                        pending.append(task)
                        continue
                    done(task, record, started)
                    started = monotonic()  # the next rollout began when this one ended

    workers = max(1, min(concurrency, executor.workers, len(tasks)))
    try:
        if provider.in_world:
            await asyncio.gather(*(batches() for _ in range(workers)))
        else:
            await asyncio.gather(*(consumer() for _ in range(min(concurrency, len(tasks)))))
    finally:
        await provider.aclose()


async def _outside_rollout(
    prepared: Environment, provider: Provider, executor: Executor, task: RolloutTask
) -> dict[str, Any]:
    """Model calls here (outside the frozen world); tool calls and grading in a worker."""
    spec = prepared.loaded.spec
    record = prepared.inputs[task.input_index]
    seed = derive_seed(spec.seed, record.id, task.rollout)
    messages = record.messages(spec.system_prompt, spec.prompt)
    schemas = tool_schemas(prepared.loaded)
    decoding = spec.decoding.model_dump()
    counters: dict[int, int] = {}

    def remaining() -> float:
        left = deadline - monotonic()
        if left <= 0:
            raise RolloutTimeout(timeout_message(spec.limits.timeout_s))
        return left

    async def call_model(current: list[dict[str, Any]], turn: int) -> ModelReply:
        request = ModelRequest(
            messages=[dict(message) for message in current],
            tools=schemas,
            decoding=decoding,
            seed=seed,
            input_id=record.id,
            rollout=task.rollout,
            turn=turn,
        )
        left = remaining()
        try:
            return await asyncio.wait_for(provider.complete(request), left)
        except TimeoutError:
            raise RolloutTimeout(timeout_message(spec.limits.timeout_s)) from None

    async def call_tool(call: dict[str, Any], turn: int) -> ToolOutcome:
        number = counters.get(turn, 0)
        counters[turn] = number + 1
        return await executor.tool(task, call, turn, number, remaining())

    await executor.prepare(task)
    deadline = monotonic() + spec.limits.timeout_s  # from when a worker took the rollout
    try:
        trajectory = await rollout_loop(messages, spec.limits.max_turns, call_model, call_tool)
    except InfraError as exc:  # pragma: no cover - rollout_loop classifies these
        trajectory = Trajectory(messages=messages, status="infra_error", error=str(exc))
    left = deadline - monotonic()
    if left <= 0:  # the worker makes the timeout record (and removes the workdir)
        trajectory = Trajectory(messages=messages, status="timeout")
    # grading is part of the rollout's time (a timed-out rollout is not graded)
    return await executor.finish(task, trajectory, provider.uri, max(left, 0.0))


def _hazards(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Decoding settings that make sampled KL estimates biased or exploitable."""
    from rlenv.policy_shift.hazards import decoding_hazards

    return decoding_hazards(meta["decoding"])


def world_modes(executor: str = "local") -> dict[str, str]:
    """Which isolation mechanisms were in force (not part of the digest)."""
    from rlenv.sandbox import faketime_library, probe_mechanism
    from rlenv.world.netguard import network_guard_mode

    return {
        "sandbox": probe_mechanism(),
        # a Ray actor must reach its raylet: no network namespace, the in-process guard only
        "network_guard": "python" if executor == "ray" else network_guard_mode(False),
        "subprocess_clock": "libfaketime" if faketime_library() else "real",
        "python_clock": "freezegun",
    }


@dataclass
class _Totals:
    """What a summary needs of each record, gathered one record at a time: as this process
    writes it to results.jsonl (:meth:`add_line`: the line decoded back, so what is tallied is
    what is on disk), and as the summary reads the records that were there before (:meth:`add`).
    Counts are summed on the way; of each record only a :class:`CompactRecord` is kept."""

    fixtures: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=lambda: {"hits": 0, "misses": 0})
    pending: int = 0
    compact: list[CompactRecord] = field(default_factory=list)
    shared: dict[Any, Any] = field(default_factory=dict)
    written: int = 0
    """Lines this process wrote; the first `written - len(refused)` rows of `compact` are theirs."""
    refused: dict[int, str] = field(default_factory=dict)
    """Position among the lines written -> why it is no rollout record (said in line order)."""

    def add(self, record: dict[str, Any]) -> None:
        for call in record.get("tool_calls") or []:
            self.fixtures[call["fixture"]] = self.fixtures.get(call["fixture"], 0) + 1
        for key, value in (record.get("usage") or {}).items():
            if isinstance(value, int):
                self.usage[key] = self.usage.get(key, 0) + value
        for key, value in ((record.get("timing") or {}).get("grader_cache") or {}).items():
            self.cache[key] = self.cache.get(key, 0) + int(value)
        self.pending += record.get("grading") == "pending"
        self.compact.append(compact_for_metrics(record, self.shared))

    def add_line(self, line: bytes) -> None:
        """A line this process just appended to results.jsonl. Its digest was sealed where the
        record was made (the worker) and is not recomputed here: later readers recompute it
        from the file. What the summary checks of every record is checked too, at its end
        (:meth:`check_written`): a rollout record, with a digest, in its place in the run."""
        record = decode_line(line)
        position, self.written = self.written, self.written + 1
        try:
            str(record["input_id"]), int(record["rollout"]), int(record.get("input_index", 0))
        except (KeyError, TypeError, ValueError, AttributeError):
            self.refused[position] = "not a rollout record"
            return
        if not record.get("digest"):
            self.refused[position] = "record has no digest"
            return
        self.add(record)

    def check_written(self, checks: RecordChecks, first_line: int) -> None:
        """The lines this process wrote, checked in their place after the earlier ones (lines
        `first_line`...), as the summary checks every record of results.jsonl."""
        rows = iter(self.compact)
        for position in range(self.written):
            number = first_line + position
            if position in self.refused:
                raise TamperedRun(self.refused[position], where=f"{checks.where}:{number}")
            row = next(rows)
            checks.check_key(number, row.input_id, row.rollout, row.input_index)


def build_summary(
    prepared: Environment,
    meta: dict[str, Any],
    records: Iterable[dict[str, Any]],
    model_uri: str,
    where: str = "results.jsonl",
    baseline: Sequence[Mapping[str, Any]] | None = None,
    written: _Totals | None = None,
) -> dict[str, Any]:
    """summary.json: env, model, decoding, counts, pass rates, pass@k/pass^k, reward, digest.

    `records` is consumed once (a generator over results.jsonl is fine): totals are summed on
    the way and only a compact form of each record is kept for the metrics, so a 100k-rollout
    run is summarised in little memory. Each record's digest is recomputed from its content on
    the way, and a duplicate or missing (input, rollout) is refused: TamperedRun naming
    ``where:LINE`` (line = position in `records`, as in results.jsonl).

    `written` holds what `run` tallied of the lines it appended itself (after `records`, the
    lines that were there before: none, or an earlier run's on --resume); their digests were
    sealed by the workers, and they are checked in their place after `records`.
    """
    from rlenv import metrics

    expected_inputs = meta.get("input_indices") or len(
        prepared.inputs[: meta["limit"]] if meta["limit"] else prepared.inputs
    )
    checks = RecordChecks(
        where, rollouts_per_input=meta["rollouts_per_input"], inputs=expected_inputs
    )
    totals = written if written is not None else _Totals()
    line = 0
    for line, record in enumerate(records, start=1):
        checks.check(line, record)
        totals.add(record)
    totals.check_written(checks, first_line=line + 1)
    checks.finish()
    totals.compact.sort(key=lambda r: (r.input_index, r.rollout))
    # (input index, rollout) is unique once checked: the run digest's own order
    digest = digest_in_order(unpacked(row.digest) for row in totals.compact)
    diagnostics = metrics.compute_all(totals.compact, decoding=meta["decoding"], baseline=baseline)
    group_by = meta.get("group_by")
    groups = None
    if group_by:
        labels = {record.id: record.data.get(group_by) for record in prepared.inputs}
        groups = {"field": group_by, **metrics.group_stats(totals.compact, labels)}
    n_records = len(totals.compact)
    n_inputs = len({record["input_id"] for record in totals.compact})
    calibration = meta.get("reward_calibration")
    totals_compact, totals.compact = totals.compact, []
    return {
        "verdict": diagnostics["verdict"],
        "env": meta["env"],
        "model": meta["model"],
        "decoding": meta["decoding"],
        "rollouts_per_input": meta["rollouts_per_input"],
        "inputs": n_inputs,
        "rollouts": n_records,
        # a served session (`rlenv serve`) has no fixed number of rollouts per input
        "expected_rollouts": None
        if meta["rollouts_per_input"] is None
        else (expected_inputs if isinstance(expected_inputs, int) else len(expected_inputs))
        * meta["rollouts_per_input"],
        "counts": diagnostics["counts"]["by_status"],
        "pass_rate": diagnostics["pass_rate"],
        "pass_at_k": diagnostics["pass_k"]["pass@k"],
        "pass_hat_k": diagnostics["pass_k"]["pass^k"],
        "verifiers": diagnostics["verifiers"],
        "reward": diagnostics["reward"] if diagnostics["reward"].get("count") else None,
        **(
            {"reward_components": diagnostics["reward_components"]}
            if diagnostics.get("reward_components")
            else {}
        ),
        "fixtures": dict(sorted(totals.fixtures.items())),
        "usage": dict(sorted(totals.usage.items())),
        "diagnostics": {
            key: diagnostics[key]
            for key in (
                "disagreements",
                "reward_auc",
                "length_bias",
                "diversity",
                "sample_efficiency",
                "kl",
            )
        },
        "kl": diagnostics["kl"],
        **({"groups": groups} if groups is not None else {}),
        **(
            {"reward_calibrated": metrics.calibrated_reward(totals_compact, calibration)}
            if calibration is not None
            else {}
        ),
        "hazards": _hazards(meta) if meta.get("reference") else [],
        "world": meta.get("world") or world_modes(meta.get("executor", "local")),
        "grading": {"pending_rollouts": totals.pending, "grader_cache": totals.cache},
        "errors": diagnostics["errors"],
        "flags": diagnostics["flags"],
        "digest": digest,
        "rlenv_version": __version__,
    }
