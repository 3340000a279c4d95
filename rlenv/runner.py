"""`rlenv run`: every held-out input x K rollouts, scored, streamed to a run directory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.agent import RolloutTimeout, ToolOutcome, Trajectory, rollout_loop
from rlenv.canonical import canonical_bytes
from rlenv.clock import monotonic, wall_now
from rlenv.env import Environment, load_environment, policy_sources
from rlenv.errors import InfraError, UserError
from rlenv.executors import Executor, check_executor, make_executor
from rlenv.files import atomic_write, default_cache_dir
from rlenv.inputs import InputRecord, select
from rlenv.providers.base import ModelReply, ModelRequest, Provider, check_reference
from rlenv.providers.registry import resolve_provider
from rlenv.results import ResultsWriter, RunDigest, iter_results, read_results
from rlenv.seeding import derive_seed
from rlenv.version import __version__
from rlenv.worker import RolloutTask, WorkerConfig, tool_schemas

DEFAULT_CONCURRENCY = 4


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]

    @property
    def digest(self) -> str:
        return str(self.summary["digest"])


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
    reference: str | None = None,
    expensive_fraction: float = 1.0,
    defer_expensive: bool = False,
    grader_cache: bool | Path = True,
    executor: str = "local",
    address: str | None = None,
    ids: list[str] | None = None,
    where: dict[str, str] | None = None,
    group_by: str | None = None,
) -> RunResult:
    """Run an env against a model; return the run directory and its summary.

    `executor` is "local" (worker processes on this machine) or "ray" (actors on the Ray cluster
    at `address`: "auto", HOST:PORT or ray://HOST:PORT; default a new local Ray instance); both
    give the same results.

    With `record_dir` (used by `rlenv record`) tools reach the live network through recording
    cassettes in that directory, one worker at a time (vcrpy is not safe to share).

    `ids` and `where` choose inputs (by id; by field values), before `limit`; `group_by` names
    an input field whose values split the summary's pass rate and reward (``groups``).
    """
    _check_options(concurrency, executor, address, rollouts, limit, expensive_fraction)
    prepared = load_environment(
        spec_path,
        purpose="record" if record_dir is not None else "run",
        model=model,
        defer_expensive=defer_expensive,
    )
    spec = prepared.loaded.spec
    provider, model_uri, reference = _resolve_policy(
        prepared, model, reference, base_url, concurrency
    )
    rollouts_per_input = rollouts or spec.rollouts
    inputs = select(prepared.inputs, ids=ids, where=where, limit=limit)
    run_dir = Path(out) if out else default_run_dir(spec.name, model_uri, runs_root)
    meta = {
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
        # probed now, while this process is small (the probes fork it)
        "world": world_modes(executor),
        "expensive_fraction": expensive_fraction,
        "deferred_expensive": defer_expensive,
        "executor": executor,
    }
    if group_by:
        meta["group_by"] = group_by
    if prepared.calibration is not None:
        # only with a calibration beside the reward model: other runs' run.json stay as they were
        meta["reward_calibration"] = prepared.calibration
    with _run_dir_lock(run_dir, resume):
        done = _open_run_dir(run_dir, meta, resume)
        tasks = _pending_tasks(inputs, rollouts_per_input, done)
        total = len(inputs) * rollouts_per_input
        work_root = Path(tempfile.mkdtemp(prefix="rlenv-work-", dir=_work_parent()))
        try:
            config = _worker_config(prepared, provider, work_root, record_dir, meta, grader_cache)
            _run_tasks(
                prepared,
                provider,
                tasks,
                config,
                run_dir / "results.jsonl",
                kind=executor,
                address=address,
                concurrency=1 if record_dir is not None else concurrency,
                advance=lambda n: progress(len(done) + n, total) if progress else None,
            )
        finally:
            shutil.rmtree(work_root, ignore_errors=True)
        results = run_dir / "results.jsonl"
        summary = build_summary(prepared, meta, iter_results(results), model_uri, str(results))
        atomic_write(run_dir / "summary.json", _pretty(summary))
    return RunResult(run_dir, summary)


LOCK_NAME = ".rlenv.lock"
# run.json fields that do not change results: where the spec file lives, where rollouts ran and
# which isolation mechanisms the machine offers (the digest is the same under all of them)
_RESUME_FREE = frozenset({"spec", "executor", "world", "group_by"})


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
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / LOCK_NAME, timeout=0, preserve_lock_file=True)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(
            f"--out {run_dir} is in use by another rlenv run (it holds {LOCK_NAME});"
            " wait for it to finish or choose another directory"
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
            found = _first_difference(earlier.get(key), now.get(key), f"{path}{key}.")
            if found:
                return found
        return None
    if canonical_bytes(earlier) != canonical_bytes(now):
        return path.rstrip(".") or "run.json"
    return None


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
    if rollouts is not None and rollouts < 1:
        raise UserError("--rollouts must be at least 1")
    if limit is not None and limit < 1:
        raise UserError("--limit must be at least 1")
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


def _resolve_policy(
    prepared: Environment,
    model: str | None,
    reference: str | None,
    base_url: str | None,
    concurrency: int,
) -> tuple[Provider, str, str | None]:
    """The policy's provider, its model URI and the KL reference (argument or spec)."""
    spec = prepared.loaded.spec
    model_uri = model or spec.model
    if not model_uri:
        raise UserError("no model: pass --model URI or set 'model' in the spec")
    reference = reference or spec.reference
    check_reference(model_uri, reference)
    options: dict[str, Any] | None = None
    if reference:
        options = {"reference": reference}
    elif model_uri.startswith("openai:"):
        options = {"max_connections": max(256, concurrency), "pools": max(1, concurrency // 8)}
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
) -> None:
    """Start the workers, run the tasks `concurrency` at a time, append each record."""
    writer = ResultsWriter(results_path)
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


def _open_run_dir(run_dir: Path, meta: dict[str, Any], resume: bool) -> set[tuple[str, int]]:
    """Create the run directory, or reopen it for --resume; never overwrite an earlier run."""
    results = run_dir / "results.jsonl"
    meta_path = run_dir / "run.json"
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--out {run_dir} exists and is not a directory")
    if resume:
        if not meta_path.is_file():
            raise UserError(f"--resume: {run_dir} holds no run to resume (no run.json)")
        try:
            earlier = json.loads(meta_path.read_text())
        except (OSError, ValueError) as exc:
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
        return {(str(record["input_id"]), int(record["rollout"])) for record in records}
    if run_dir.exists() and any(entry.name != LOCK_NAME for entry in run_dir.iterdir()):
        raise UserError(
            f"--out {run_dir} already holds a run; pass --resume to continue it or choose another"
            " directory"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(meta_path, _pretty({**meta, "rlenv_version": __version__}))
    return set()


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

    async def consumer() -> None:
        nonlocal finished
        for task in queue:
            started = monotonic()
            if provider.in_world:
                record = await executor.run_rollout(task)
            else:
                record = await _outside_rollout(prepared, provider, executor, task)
            record.setdefault("timing", {})["wall_s"] = round(monotonic() - started, 6)
            writer.write(record)
            finished += 1
            advance(finished)

    try:
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
    deadline = monotonic() + spec.limits.timeout_s
    counters: dict[int, int] = {}

    def remaining() -> float:
        left = deadline - monotonic()
        if left <= 0:
            raise RolloutTimeout(f"rollout exceeded {spec.limits.timeout_s}s")
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
        try:
            return await asyncio.wait_for(provider.complete(request), remaining())
        except TimeoutError:
            raise RolloutTimeout(f"rollout exceeded {spec.limits.timeout_s}s") from None

    async def call_tool(call: dict[str, Any], turn: int) -> ToolOutcome:
        number = counters.get(turn, 0)
        counters[turn] = number + 1
        remaining()
        return await executor.tool(task, call, turn, number)

    await executor.prepare(task)
    try:
        trajectory = await rollout_loop(messages, spec.limits.max_turns, call_model, call_tool)
    except InfraError as exc:  # pragma: no cover - rollout_loop classifies these
        trajectory = Trajectory(messages=messages, status="infra_error", error=str(exc))
    return await executor.finish(task, trajectory, provider.uri)


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
    """What a summary needs of each record, gathered in one pass over results.jsonl."""

    fixtures: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=lambda: {"hits": 0, "misses": 0})
    pending: int = 0
    compact: list[dict[str, Any]] = field(default_factory=list)
    digest: str = ""


def _tally(records: Iterable[dict[str, Any]]) -> _Totals:
    """Sum counts and keep a compact form of each record (in (input, rollout) order)."""
    from rlenv.results import compact_for_metrics

    totals = _Totals()
    run_digest = RunDigest()
    shared: dict[Any, Any] = {}
    for record in records:
        for call in record.get("tool_calls") or []:
            totals.fixtures[call["fixture"]] = totals.fixtures.get(call["fixture"], 0) + 1
        for key, value in (record.get("usage") or {}).items():
            if isinstance(value, int):
                totals.usage[key] = totals.usage.get(key, 0) + value
        for key, value in ((record.get("timing") or {}).get("grader_cache") or {}).items():
            totals.cache[key] = totals.cache.get(key, 0) + int(value)
        totals.pending += record.get("grading") == "pending"
        run_digest.add(record)
        totals.compact.append(compact_for_metrics(record, shared))
    totals.digest = run_digest.hexdigest()
    totals.compact.sort(key=lambda r: (r["input_index"], r["rollout"]))
    return totals


def build_summary(
    prepared: Environment,
    meta: dict[str, Any],
    records: Iterable[dict[str, Any]],
    model_uri: str,
    where: str = "results.jsonl",
) -> dict[str, Any]:
    """summary.json: env, model, decoding, counts, pass rates, pass@k/pass^k, reward, digest.

    `records` is consumed once (a generator over results.jsonl is fine): totals are summed on
    the way and only a compact form of each record is kept for the metrics, so a 100k-rollout
    run is summarised in little memory. Each record's digest is recomputed from its content on
    the way, and a duplicate or missing (input, rollout) is refused: TamperedRun naming
    ``where:LINE`` (line = position in `records`, as in results.jsonl).
    """
    from rlenv import metrics
    from rlenv.check import verified_records

    expected_inputs = meta.get("input_indices") or len(
        prepared.inputs[: meta["limit"]] if meta["limit"] else prepared.inputs
    )
    totals = _tally(
        verified_records(
            enumerate(records, start=1),
            where,
            rollouts_per_input=meta["rollouts_per_input"],
            inputs=expected_inputs,
        )
    )
    diagnostics = metrics.compute_all(totals.compact, decoding=meta["decoding"])
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
        "env": meta["env"],
        "model": meta["model"],
        "decoding": meta["decoding"],
        "rollouts_per_input": meta["rollouts_per_input"],
        "inputs": n_inputs,
        "rollouts": n_records,
        "expected_rollouts": (
            expected_inputs if isinstance(expected_inputs, int) else len(expected_inputs)
        )
        * meta["rollouts_per_input"],
        "counts": diagnostics["counts"]["by_status"],
        "pass_rate": diagnostics["pass_rate"],
        "pass_at_k": diagnostics["pass_k"]["pass@k"],
        "pass_hat_k": diagnostics["pass_k"]["pass^k"],
        "verifiers": diagnostics["verifiers"],
        "reward": diagnostics["reward"] if diagnostics["reward"].get("count") else None,
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
        "flags": diagnostics["flags"],
        "digest": totals.digest,
        "rlenv_version": __version__,
    }
