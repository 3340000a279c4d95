"""`rlenv run`: every held-out input x K rollouts, scored, streamed to a run directory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv import __version__
from rlenv.agent import RolloutTimeout, ToolOutcome, Trajectory, rollout_loop
from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.clock import monotonic, wall_now
from rlenv.errors import InfraError, UserError
from rlenv.executor import LocalExecutor
from rlenv.inputs import InputRecord, load_inputs
from rlenv.providers.base import ModelReply, ModelRequest, check_reference
from rlenv.providers.registry import resolve_provider
from rlenv.results import ResultsWriter, iter_results, read_results
from rlenv.seeding import derive_seed
from rlenv.spec import LoadedSpec, check_files, fingerprint, load_spec
from rlenv.world.runtime import RolloutTask, WorkerConfig, tool_schemas

if TYPE_CHECKING:
    from rlenv.executors.ray import RayExecutor

DEFAULT_CONCURRENCY = 4


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]

    @property
    def digest(self) -> str:
        return str(self.summary["digest"])


@dataclass
class Prepared:
    """A spec that passed every check that can be made before any policy call."""

    loaded: LoadedSpec
    file_hashes: dict[str, str]
    fingerprint: str
    inputs: list[InputRecord]
    warnings: list[str] = field(default_factory=list)


def prepare(spec_path: str | Path, *, recording: bool = False) -> Prepared:
    """Load the spec, check pinned hashes and inputs, and import every referenced callable."""
    loaded = load_spec(spec_path)
    hashes = check_files(loaded, cassettes=not recording)
    inputs = load_inputs(loaded.inputs_path)
    _check_importable(loaded, cassettes=not recording)
    from rlenv.rm.leakage import enforce_leakage

    warnings = enforce_leakage(loaded)
    return Prepared(loaded, hashes, fingerprint(loaded, hashes), inputs, warnings)


def _reward_endpoints(loaded: LoadedSpec) -> list[tuple[str, int]]:
    """An HTTP reward model is scored inside the frozen world: let its host through."""
    from urllib.parse import urlsplit

    uri = getattr(loaded.spec.reward_model, "uri", None) or ""
    if not uri.startswith(("http://", "https://")):
        return []
    parts = urlsplit(uri)
    return [(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))]


def _check_importable(loaded: LoadedSpec, *, cassettes: bool = True) -> None:
    """Import tools, verifiers and the reward model in a worker-like way, without freezing."""
    from rlenv.providers.base import import_ref
    from rlenv.rewards import build_reward_model
    from rlenv.verifiers import build_verifiers

    added = [str(p) for p in loaded.python_paths() if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        for index, tool in enumerate(loaded.spec.tools):
            function = import_ref(tool.function, what=f"tools[{index}].function")
            if not callable(function):
                raise UserError(f"tools[{index}].function: {tool.function} is not callable")
            cassette = loaded.cassette_path(tool)
            if cassette is not None and cassettes:
                _refuse_secrets(loaded, index, cassette)
        build_verifiers(list(loaded.spec.verifiers))
        build_reward_model(loaded.spec.reward_model, loaded.root)
    finally:
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)


def _refuse_secrets(loaded: LoadedSpec, index: int, cassette: Path) -> None:
    """A committed fixture must not carry a credential: refuse the spec if one looks like it."""
    from rlenv.world.replay import load_index
    from rlenv.world.runtime import build_scrubber

    _, found = load_index(cassette, build_scrubber(loaded))
    # issue 13: findings the spec allow-lists (scrub.allow) are accepted
    from rlenv.world.secrets import unallowed

    found = unallowed(found, cassette.name, loaded.spec.scrub.allow if loaded.spec.scrub else [])
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise UserError(
            f"tools[{index}].cassette: {cassette.name} holds a secret-looking value:"
            f" {found[0]}{more};"
            " re-record with `rlenv record` (it scrubs) or scrub the file",
            where=str(loaded.path),
        )


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


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


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
) -> RunResult:
    """Run an env against a model; return the run directory and its summary.

    `executor` is "local" (worker processes on this machine) or "ray" (actors on the Ray cluster
    at `address`: "auto", HOST:PORT or ray://HOST:PORT; default a new local Ray instance); both
    give the same results.

    With `record_dir` (used by `rlenv record`) tools reach the live network through recording
    cassettes in that directory, one worker at a time (vcrpy is not safe to share).
    """
    if concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    if executor not in ("local", "ray"):
        raise UserError(f"--executor must be local or ray, not {executor!r}")
    if address and executor != "ray":
        raise UserError("--address needs --executor ray")
    if executor == "ray":
        from rlenv.executors.ray import preflight

        preflight(address)  # Ray installed, the cluster answers: before any run directory
    if rollouts is not None and rollouts < 1:
        raise UserError("--rollouts must be at least 1")
    if limit is not None and limit < 1:
        raise UserError("--limit must be at least 1")
    if not 0 <= expensive_fraction <= 1:
        raise UserError("--expensive-fraction must be between 0 and 1")
    prepared = prepare(spec_path, recording=record_dir is not None)
    spec = prepared.loaded.spec
    if defer_expensive:
        for index, verifier in enumerate(spec.verifiers):
            if verifier.cost == "expensive" and verifier.type == "file_state":
                raise UserError(
                    f"verifiers[{index}]: a file_state verifier cannot be deferred (the rollout's"
                    " files are gone by `rlenv grade`); run it inline or make it cheap"
                )
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
    provider = resolve_provider(model_uri, base_url=base_url, options=options)
    rollouts_per_input = rollouts or spec.rollouts
    inputs = prepared.inputs[:limit] if limit else prepared.inputs
    run_dir = Path(out) if out else default_run_dir(spec.name, model_uri, runs_root)
    identity = provider.identity()
    meta = {
        "env": {"name": spec.name, "version": spec.version, "fingerprint": prepared.fingerprint},
        "model": identity,
        "decoding": spec.decoding.model_dump(),
        "rollouts_per_input": rollouts_per_input,
        "limit": limit,
        "reference": reference,
        "spec": str(prepared.loaded.path),
        # probed now, while this process is small (the probes fork it)
        "world": world_modes(executor),
        "expensive_fraction": expensive_fraction,
        "deferred_expensive": defer_expensive,
        "executor": executor,
    }
    done = _open_run_dir(run_dir, meta, resume)
    tasks = [
        RolloutTask(record.index, rollout)
        for record in inputs
        for rollout in range(rollouts_per_input)
        if (record.id, rollout) not in done
    ]
    total = len(inputs) * rollouts_per_input
    work_root = Path(tempfile.mkdtemp(prefix="rlenv-work-", dir=_work_parent()))
    try:
        config = WorkerConfig(
            spec_path=str(prepared.loaded.path),
            work_root=str(work_root),
            model_uri=provider.uri if provider.in_world else None,
            allowed_endpoints=list(getattr(provider, "endpoints", lambda: [])())
            + _reward_endpoints(prepared.loaded),
            live_tools=record_dir is not None,
            record_dir=str(record_dir) if record_dir is not None else None,
            expensive_fraction=expensive_fraction,
            defer_expensive=defer_expensive,
            cache_dir=_cache_dir(grader_cache),
        )
        if record_dir is not None:
            concurrency = 1
        workers = min(concurrency, max(1, len(tasks)))
        if executor == "local":  # a Ray cluster caps the actors at its own CPU count
            workers = min(workers, os.cpu_count() or 1)
        writer = ResultsWriter(run_dir / "results.jsonl")
        try:
            if tasks:
                pool = _make_executor(executor, config, workers, address)
                try:
                    asyncio.run(
                        _execute(
                            prepared,
                            provider,
                            pool,
                            tasks,
                            concurrency,
                            writer,
                            lambda finished: (
                                progress(len(done) + finished, total) if progress else None
                            ),
                        )
                    )
                finally:
                    pool.close()
        finally:
            writer.close()
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    summary = build_summary(prepared, meta, iter_results(run_dir / "results.jsonl"), model_uri)
    _write_atomic(run_dir / "summary.json", _pretty(summary))
    return RunResult(run_dir, summary)


def _make_executor(
    kind: str, config: WorkerConfig, workers: int, address: str | None
) -> LocalExecutor | RayExecutor:
    if kind == "ray":
        from rlenv.executors.ray import RayExecutor

        return RayExecutor(config, workers, address)
    return LocalExecutor(config, workers)


def _cache_dir(grader_cache: bool | Path) -> str | None:
    from rlenv.grading import default_cache_dir

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
        earlier = json.loads(meta_path.read_text())
        for key in ("env", "model", "decoding", "rollouts_per_input"):
            if canonical_bytes(earlier.get(key)) != canonical_bytes(meta.get(key)):
                raise UserError(
                    f"--resume: {run_dir} was started with a different {key}; use another --out"
                )
        records = read_results(results, repair=True)
        return {(str(record["input_id"]), int(record["rollout"])) for record in records}
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(
            f"--out {run_dir} already holds a run; pass --resume to continue it or choose another"
            " directory"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(meta_path, _pretty({**meta, "rlenv_version": __version__}))
    return set()


async def _execute(
    prepared: Prepared,
    provider: Any,
    executor: LocalExecutor | RayExecutor,
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
    prepared: Prepared, provider: Any, executor: LocalExecutor | RayExecutor, task: RolloutTask
) -> dict[str, Any]:
    """Model calls here (outside the frozen world); tool calls and grading in a worker."""
    spec = prepared.loaded.spec
    record = prepared.inputs[task.input_index]
    seed = derive_seed(spec.seed, record.id, task.rollout)
    messages = record.messages(spec.system_prompt)
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
    from rlenv.executor import network_guard_mode
    from rlenv.sandbox import faketime_library, probe_mechanism

    return {
        "sandbox": probe_mechanism(),
        # a Ray actor must reach its raylet: no network namespace, the in-process guard only
        "network_guard": "python" if executor == "ray" else network_guard_mode(False),
        "subprocess_clock": "libfaketime" if faketime_library() else "real",
        "python_clock": "freezegun",
    }


def build_summary(
    prepared: Prepared, meta: dict[str, Any], records: Iterable[dict[str, Any]], model_uri: str
) -> dict[str, Any]:
    """summary.json: env, model, decoding, counts, pass rates, pass@k/pass^k, reward, digest.

    `records` is consumed once (a generator over results.jsonl is fine): totals are summed on
    the way and only a compact form of each record is kept for the metrics, so a 100k-rollout
    run is summarised in little memory.
    """
    from rlenv import metrics
    from rlenv.results import compact_for_metrics, record_digest

    fixture_counts: dict[str, int] = {}
    usage: dict[str, int] = {}
    cache = {"hits": 0, "misses": 0}
    pending = 0
    compact: list[dict[str, Any]] = []
    order: list[tuple[int, str, int, str]] = []
    shared: dict[Any, Any] = {}
    for record in records:
        for call in record.get("tool_calls") or []:
            fixture_counts[call["fixture"]] = fixture_counts.get(call["fixture"], 0) + 1
        for key, value in (record.get("usage") or {}).items():
            if isinstance(value, int):
                usage[key] = usage.get(key, 0) + value
        for key, value in ((record.get("timing") or {}).get("grader_cache") or {}).items():
            cache[key] = cache.get(key, 0) + int(value)
        pending += record.get("grading") == "pending"
        digest = record.get("digest") or record_digest(record)
        order.append(
            (
                int(record.get("input_index", 0)),
                str(record["input_id"]),
                int(record["rollout"]),
                digest,
            )
        )
        compact.append(compact_for_metrics(record, shared))
    order.sort()
    run_digest_value = sha256_bytes("\n".join(entry[3] for entry in order).encode())
    del order, shared
    compact.sort(key=lambda r: (r["input_index"], r["rollout"]))
    diagnostics = metrics.compute_all(compact)
    n_records = len(compact)
    n_inputs = len({record["input_id"] for record in compact})
    del compact
    flags = diagnostics["flags"]
    if meta["decoding"].get("temperature") == 0:
        # greedy decoding makes identical rollouts expected, not a collapse
        flags = [flag for flag in flags if flag["name"] != "collapse"]
    return {
        "env": meta["env"],
        "model": meta["model"],
        "decoding": meta["decoding"],
        "rollouts_per_input": meta["rollouts_per_input"],
        "inputs": n_inputs,
        "rollouts": n_records,
        "expected_rollouts": len(
            prepared.inputs[: meta["limit"]] if meta["limit"] else prepared.inputs
        )
        * meta["rollouts_per_input"],
        "counts": diagnostics["counts"]["by_status"],
        "pass_rate": diagnostics["pass_rate"],
        "pass_at_k": diagnostics["pass_k"]["pass@k"],
        "pass_hat_k": diagnostics["pass_k"]["pass^k"],
        "verifiers": diagnostics["verifiers"],
        "reward": diagnostics["reward"] if diagnostics["reward"].get("count") else None,
        "fixtures": dict(sorted(fixture_counts.items())),
        "usage": dict(sorted(usage.items())),
        "diagnostics": {
            key: diagnostics[key]
            for key in ("disagreements", "length_bias", "diversity", "sample_efficiency", "kl")
        },
        "kl": diagnostics["kl"],
        "hazards": _hazards(meta) if meta.get("reference") else [],
        "world": meta.get("world") or world_modes(meta.get("executor", "local")),
        "grading": {"pending_rollouts": pending, "grader_cache": cache},
        "flags": flags,
        "digest": run_digest_value,
        "rlenv_version": __version__,
    }
