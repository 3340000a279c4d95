"""`rlenv run`: every held-out input x K rollouts, scored, streamed to a run directory."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.audit_reader import read_baseline, seal_run_json
from rlenv.clock import monotonic
from rlenv.env import Environment, Purpose, load_environment, policy_sources
from rlenv.errors import UserError, WorkerLost
from rlenv.executors import (
    MAX_WORKERS,
    Executor,
    check_executor,
    default_workers,
    make_executor,
    world_modes,
)
from rlenv.executors.early import early_pool_size, early_workers
from rlenv.files import atomic_write, default_cache_dir, usable_out
from rlenv.inputs import select
from rlenv.outside_rollout import run_outside
from rlenv.providers.base import Provider, check_reference
from rlenv.providers.registry import resolve_provider
from rlenv.results import (
    ResultsWriter,
    RolloutRecord,
)
from rlenv.results_aside import ResultsAside, start_aside, writes_aside
from rlenv.run_dir import (
    _discard_if_empty,
    _open_run_dir,
    _pretty,
    _run_dir_lock,
    _writes_to,
    default_run_dir,
)
from rlenv.spec import MAX_ROLLOUTS
from rlenv.summary import SummaryInputs, SummaryPlan, judges_block
from rlenv.verifiers.judge import describe as describe_judges
from rlenv.verifiers.judge import judging_writer
from rlenv.worker.config import GC_THRESHOLD, PendingTasks, RolloutTask, WorkerConfig
from rlenv.worker.lost import lost_record
from rlenv.worker.timers import timeout_message

DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 1024  # rollouts in flight at most (workers: `--workers`, default cores)
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


@dataclass(frozen=True)
class RunSettings:
    """How `run` runs an env: everything but the spec and the progress callback (see `run`)."""

    model: str | None = None
    rollouts: int | None = None
    limit: int | None = None
    out: str | Path | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    workers: int | None = None  # frozen-world workers; None: `default_workers(concurrency)`
    resume: bool = False
    base_url: str | None = None
    runs_root: Path = Path("runs")
    record_dir: Path | None = None
    service_routes: dict[str, str] | None = None
    reference: str | None = None
    expensive_fraction: float = 1.0
    defer_expensive: bool = False
    grader_cache: bool | Path = True
    executor: str = "local"
    address: str | None = None
    ids: list[str] | None = None
    where: dict[str, str] | None = None
    group_by: str | None = None
    baseline: str | Path | None = None
    retry: Iterable[str] = ()
    retries: int | None = None
    request_timeout: float | None = None
    allow_weak_sandbox: bool = False


@_fewer_collections
def run(
    spec_path: str | Path,
    settings: RunSettings | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run an env against a model; return the run directory and its summary. `settings` says
    how (the fields below); `progress(done, total)` is called as rollouts finish.

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
    settings = settings or RunSettings()
    _check_options(
        settings.concurrency,
        settings.workers,
        settings.executor,
        settings.address,
        settings.rollouts,
        settings.limit,
        settings.expensive_fraction,
    )
    if settings.model and settings.reference:  # a mismatched pair: said before the env loads
        check_reference(settings.model, settings.reference)
    _check_retry(tuple(settings.retry), settings.resume)
    # the workers start while the env loads (`rlenv.executors.early`)
    pool = early_pool_size(settings, default_workers(settings.concurrency))
    with early_workers(spec_path, pool, _work_parent()) as early:
        return _run(spec_path, settings, progress, early)


def _run(
    spec_path: str | Path,
    settings: RunSettings,
    progress: Callable[[int, int], None] | None,
    early: Executor | None,
) -> RunResult:
    reference = settings.reference
    retry = tuple(sorted(set(settings.retry)))
    purpose: Purpose = "record" if settings.record_dir is not None else "run"
    # the checks that import the env's modules run in the workers, which import them anyway
    world_checks = {
        "purpose": purpose,
        "model": settings.model,
        "defer_expensive": settings.defer_expensive,
    }
    prepared = load_environment(
        spec_path,
        purpose=purpose,
        model=settings.model,
        defer_expensive=settings.defer_expensive,
        world_checks="workers",
    )
    spec = prepared.loaded.spec
    provider, model_uri, reference = _resolve_policy(
        prepared,
        settings.model,
        reference,
        settings.base_url,
        settings.concurrency,
        settings.retries,
        settings.request_timeout,
    )
    base = (
        read_baseline(settings.baseline, prepared.fingerprint)
        if settings.baseline is not None
        else None
    )
    rollouts_per_input = settings.rollouts or spec.rollouts
    if check_inputs := getattr(provider, "check_inputs", None):  # replay: lines for no rollout
        check_inputs(prepared.inputs, rollouts_per_input)
    inputs = select(prepared.inputs, ids=settings.ids, where=settings.where, limit=settings.limit)
    run_dir = (
        Path(settings.out)
        if settings.out
        else default_run_dir(spec.name, model_uri, settings.runs_root)
    )
    world = world_modes(
        settings.executor
    )  # probed now, while this process is small (the probes fork it)
    meta: dict[str, Any] = {
        "env": {"name": spec.name, "version": spec.version, "fingerprint": prepared.fingerprint},
        "model": _model_identity(prepared, provider, model_uri),
        "decoding": spec.decoding.model_dump(),
        "rollouts_per_input": rollouts_per_input,
        "limit": settings.limit,
        # only for chosen inputs: run.json of an ordinary run stays as it was
        **(
            {
                "select": {"ids": settings.ids or None, "where": settings.where or None},
                "input_indices": [record.index for record in inputs],
            }
            if settings.ids or settings.where
            else {}
        ),
        "inputs": len(inputs),
        "reference": reference,
        "spec": str(prepared.loaded.path),
        "world": world,
        "expensive_fraction": settings.expensive_fraction,
        "deferred_expensive": settings.defer_expensive,
        "executor": settings.executor,
    }
    if settings.group_by:
        meta["group_by"] = settings.group_by
    if base is not None:  # judged against it: a reader reads it again (rlenv.audit_reader)
        meta["baseline"] = base.source
    if any(verifier.judge is not None for verifier in prepared.loaded.spec.verifiers):
        meta["judges"] = describe_judges(prepared.loaded)  # model, decoding, rubric digest
    created = not usable_out(run_dir).exists()
    weak = settings.allow_weak_sandbox or weak_sandbox_allowed()
    if weak and world["sandbox"] == "rlimits":
        meta["allow_weak_sandbox"] = True
    if prepared.calibration is not None:
        # only with a calibration beside the reward model: other runs' run.json stay as they were
        meta["reward_calibration"] = prepared.calibration
    with _run_dir_lock(run_dir, settings.resume) as lock_fd:
        done = _open_run_dir(run_dir, meta, settings.resume, retry)
        tasks = PendingTasks(inputs, rollouts_per_input, done)
        total = len(inputs) * rollouts_per_input
        results = run_dir / "results.jsonl"
        earlier = results.stat().st_size if results.exists() else 0  # --resume: a run's lines
        try:
            with _writes_to(run_dir):
                work_root = Path(tempfile.mkdtemp(prefix="rlenv-work-", dir=_work_parent()))
                try:
                    config = _worker_config(
                        prepared,
                        provider,
                        work_root,
                        settings.record_dir,
                        meta,
                        settings.grader_cache,
                    )
                    config.service_routes = dict(settings.service_routes or {})
                    config.world_checks = world_checks
                    config.allow_weak_sandbox = weak

                    # only the lines that were there before are read again (and their
                    # digests recomputed): those this run writes are tallied as written
                    plan = SummaryPlan(
                        SummaryInputs.of(prepared, meta),
                        meta,
                        results,
                        earlier,
                        model_uri,
                        baseline=base,
                    )
                    summary = _run_tasks(
                        prepared,
                        provider,
                        tasks,
                        config,
                        results,
                        kind=settings.executor,
                        address=settings.address,
                        concurrency=1 if settings.record_dir is not None else settings.concurrency,
                        workers=1 if settings.record_dir is not None else settings.workers,
                        advance=lambda n: progress(len(done) + n, total) if progress else None,
                        plan=plan,
                        hold=lock_fd,
                        early=early,
                    )
                finally:
                    shutil.rmtree(work_root, ignore_errors=True)
                judged = judges_block(meta, run_dir)
                if judged is not None:
                    summary["judges"] = judged
                atomic_write(run_dir / "summary.json", _pretty(seal_run_json(summary, run_dir)))
        except BaseException:
            if not settings.resume:
                _discard_if_empty(run_dir, created)
            raise
    return RunResult(run_dir, summary)


def weak_sandbox_allowed() -> bool:
    """RLENV_ALLOW_WEAK_SANDBOX=1 is set (the same as --allow-weak-sandbox)."""
    from rlenv.sandbox.mechanism import WEAK_SANDBOX_VARIABLE  # not verifiers.code: 0.1 s

    return os.environ.get(WEAK_SANDBOX_VARIABLE) == "1"


def _check_options(
    concurrency: int,
    workers: int | None,
    executor: str,
    address: str | None,
    rollouts: int | None,
    limit: int | None,
    expensive_fraction: float,
) -> None:
    """The user errors `run` can find in its arguments alone, before any run directory."""
    if concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise UserError(f"--workers must be between 1 and {MAX_WORKERS}")
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
        # one aiohttp session (several were for httpx, whose one pool serialised requests)
        options = {"max_connections": max(256, concurrency)}
        if retries is not None:
            options["max_retries"] = retries
        if request_timeout is not None:
            options["request_timeout"] = request_timeout
    provider = resolve_provider(model_uri, base_url=base_url, options=options)
    return provider, model_uri, reference


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


def _run_tasks(
    prepared: Environment,
    provider: Provider,
    tasks: PendingTasks | list[RolloutTask],
    config: WorkerConfig,
    results_path: Path,
    *,
    kind: str,
    address: str | None,
    concurrency: int,
    advance: Callable[[int], None],
    plan: SummaryPlan,
    hold: int | None = None,
    workers: int | None = None,
    early: Executor | None = None,
) -> dict[str, Any]:
    """Start the workers (`workers`, default `default_workers`), run the tasks `concurrency`
    at a time multiplexed over them, append each record, tallied as it is written; then the
    summary of `plan`, once every line is written. The lines are written, tallied and
    summarised by a process of their own when the rollouts call a model over the network
    (rlenv.results_aside: this process's one core is then what limits the run), which holds
    `hold` (the run directory's lock) open until it has written the last of them."""
    base: ResultsWriter | ResultsAside | None = None
    spec = prepared.loaded.spec
    if tasks and writes_aside(provider, kind, bool(spec.tools) or spec.user is not None):
        base = start_aside(plan, hold)  # None: none to be had, written here
    written = plan.totals()
    if base is None:
        base = ResultsWriter(results_path, written.add_line)
    writer: Any = base
    if not config.live_tools:  # a judge's live judgments are made here, outside the world
        writer = judging_writer(prepared.loaded, prepared.inputs, base, results_path.parent)
    try:
        if tasks:
            pool = default_workers(concurrency) if workers is None else workers
            executor = make_executor(
                kind, config, min(pool, len(tasks)), address, exact=workers is not None, early=early
            )
            try:
                with asyncio.Runner(loop_factory=_loop_factory(kind)) as runner:
                    runner.run(
                        _execute(prepared, provider, executor, tasks, concurrency, writer, advance)
                    )
            finally:
                executor.close()
        if isinstance(base, ResultsAside):
            return base.finish()
    finally:
        writer.close()
    return plan.build(written)


def _loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop for a local run (a dependency on Linux and macOS): at 256 rollouts
    in flight the orchestrator's event loop and HTTP client are most of its CPU per rollout,
    and uvloop's loop costs less than asyncio's. None (asyncio's own loop) for Ray, whose
    client library schedules on the loop itself, and where uvloop is not installed."""
    if kind != "local":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


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


async def _execute(
    prepared: Environment,
    provider: Provider,
    executor: Executor,
    tasks: PendingTasks | list[RolloutTask],
    concurrency: int,
    writer: ResultsWriter,
    advance: Callable[[int], None],
) -> None:
    queue: Iterator[RolloutTask] = iter(tasks)
    finished = 0
    timeout_s = prepared.loaded.spec.limits.timeout_s

    def done(task: RolloutTask, record: RolloutRecord | WorkerLost, started: float) -> None:
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

    again: collections.deque[RolloutTask] = collections.deque()  # what a lost worker left
    left = len(tasks)

    def take(size: int) -> list[RolloutTask]:
        nonlocal left
        batch = [again.popleft() for _ in range(min(size, len(again)))]
        batch += itertools.islice(queue, size - len(batch))
        left -= len(batch)
        return batch

    async def batches() -> None:
        """In-world rollouts go to a worker many at a time (one request, an answer per
        rollout); what a lost worker did not reach is queued again."""
        nonlocal left
        while left > 0:
            batch = take(max(1, min(MAX_BATCH, left // (2 * workers))))
            if not batch:
                return
            started = monotonic()
            async with contextlib.aclosing(executor.run_batch(batch, timeout_s)) as answers:
                async for task, record in answers:
                    if record is None:
                        again.append(task)
                        left += 1
                        continue
                    done(task, record, started)
                    started = monotonic()  # the next rollout began when this one ended

    workers = max(1, min(concurrency, executor.workers, len(tasks)))
    try:
        if provider.in_world:
            await asyncio.gather(*(batches() for _ in range(workers)))
        else:
            spec = prepared.loaded.spec
            aside = 0 if spec.tools or spec.user is not None else concurrency  # gradings aside
            conversing = min(concurrency, len(tasks))
            await run_outside(prepared, provider, executor, queue, conversing, aside, done)
    finally:
        await provider.aclose()
