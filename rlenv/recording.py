"""`rlenv record`: run the policy with tools live once, and keep their HTTP as cassettes.

Secrets are scrubbed before anything is written; error responses (HTTP >= 400, empty bodies)
are kept too, scrubbed, unless the spec says ``scrub: {record_errors: false}`` (a model's bad
request then replays as it was answered, not as a miss); the spec's pinned cassette hashes are
updated so `validate` passes afterwards.

A recording that could not see the world is refused (RunFailed, exit 1) and writes nothing:
a tool request that could not connect (the service is down), a policy or tool that crashed, a
model endpoint that failed.
The spec's services are started here, under libfaketime at the spec's instant, and stopped
afterwards; cassettes hold their logical URLs only.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlenv.canonical import sha256_file
from rlenv.clock import wall_now
from rlenv.errors import RunFailed, UserError
from rlenv.files import atomic_write
from rlenv.results import iter_results
from rlenv.runner import RunSettings, run
from rlenv.spec import LoadedSpec, load_spec
from rlenv.verifiers.judge import merge_recording
from rlenv.world.replay import load_interactions
from rlenv.world.services import date_warning, dated_responses, started_services


@dataclass
class RecordingResult:
    cassettes: dict[str, dict[str, object]] = field(default_factory=dict)
    spec_updated: bool = False
    repinned: list[str] = field(default_factory=list)  # spec files whose stale hashes it replaced
    summary: dict[str, object] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)  # name -> logical base URL
    warnings: list[str] = field(default_factory=list)
    record_errors: bool = True  # error responses were kept (scrubbed)
    pinned: list[str] = field(default_factory=list)  # hashes the spec lacked, written now


def record(
    spec_path: str | Path,
    *,
    model: str | None = None,
    mode: Literal["new", "all"] = "new",
    base_url: str | None = None,
    limit: int | None = None,
    rollouts: int | None = None,
) -> RecordingResult:
    """Record every tool's HTTP while the policy runs; `mode="all"` re-records from scratch."""
    if mode not in ("new", "all"):
        raise UserError(f"--mode must be 'new' or 'all', got {mode!r}")
    from rlenv.pin import pin

    # a fresh spec: the hashes of the files that exist (inputs, snapshot...) are pinned first;
    # the cassettes this recording writes are pinned at its end
    early = pin(spec_path, missing_only=True)  # writes the spec only when a hash was missing
    loaded = load_spec(spec_path)
    tools = [tool for tool in loaded.spec.tools if tool.cassette is not None]
    user = loaded.spec.user
    if user is not None and user.cassette is not None:  # its replies are recorded like a tool's
        from rlenv.spec import Tool

        cassette = {"path": user.cassette.path, "sha256": user.cassette.sha256}
        tools.append(
            Tool.model_validate({"name": "user", "function": "user:reply", "cassette": cassette})
        )
    judges = [
        verifier
        for verifier in loaded.spec.verifiers
        if verifier.judge is not None and verifier.judge.cassette is not None
    ]
    if not tools and not judges:
        raise UserError(
            "no tool or judge verifier in the spec names a cassette to record (nothing to"
            " record: give a tool that makes HTTP requests `cassette: {path: ...}`)",
            where=str(loaded.path),
        )
    from rlenv.world.mcp import check_mcp_servers

    check_mcp_servers(loaded)  # a server that cannot be reached: one line, before any rollout
    scratch = Path(tempfile.mkdtemp(prefix="rlenv-record-"))
    try:
        record_dir = scratch / "cassettes"
        record_dir.mkdir()
        before: dict[str, int] = {}
        for tool in tools:
            target = loaded.cassette_path(tool)
            assert target is not None
            before[tool.name] = 0
            if (
                mode == "new"
                and target.is_file()
                and target.read_bytes().strip()
                and tool.mcp is None
            ):
                shutil.copyfile(target, record_dir / f"{tool.name}.yaml")
                before[tool.name] = len(load_interactions(target))
        with _services(loaded) as routes:
            result = run(
                spec_path,
                RunSettings(
                    model=model,
                    rollouts=rollouts,
                    limit=limit,
                    out=scratch / "run",
                    base_url=base_url,
                    record_dir=record_dir,
                    service_routes=routes,
                ),
            )
        _refuse_broken_recording(scratch / "run" / "results.jsonl")
        from rlenv.worker.tools import keeps_error_responses

        outcome = RecordingResult(
            summary={"counts": result.summary["counts"]},
            record_errors=keeps_error_responses(loaded),
        )
        outcome.services = {service.name: service.base_url for service in loaded.spec.services}
        findings = []
        stale: dict[str, str] = {}  # pinned hash -> the cassette's hash now
        for tool in tools:
            target = loaded.cassette_path(tool)
            assert target is not None and tool.cassette is not None
            if tool.mcp is not None:
                info = _merge_mcp(loaded, tool.name, record_dir, target, keep=mode == "new")
                outcome.cassettes[tool.name] = info
                if tool.cassette.sha256 and tool.cassette.sha256 != info["sha256"]:
                    stale[tool.cassette.sha256] = str(info["sha256"])
                continue
            recorded = record_dir / f"{tool.name}.yaml"
            if not recorded.is_file():
                outcome.cassettes[tool.name] = {
                    "path": str(target),
                    "interactions": 0,
                    "new": 0,
                    "note": "no HTTP made; nothing written",
                }
                continue
            interactions = load_interactions(recorded)
            count = len(interactions)
            findings += dated_responses(
                tool.name,
                [response for _, response in interactions[before[tool.name] :]],
                loaded.spec.time,
                wall_now().date(),
                first=before[tool.name],
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, recorded.read_bytes())
            digest = sha256_file(target)
            outcome.cassettes[tool.name] = {
                "path": str(target),
                "interactions": count,
                "new": count - before[tool.name],
                "error_responses": sum(_is_error(response) for _, response in interactions),
                "sha256": digest,
            }
            if tool.cassette.sha256 and tool.cassette.sha256 != digest:
                stale[tool.cassette.sha256] = digest
        for verifier in judges:
            assert verifier.judge is not None and verifier.judge.cassette is not None
            target = loaded.resolve(verifier.judge.cassette.path)
            exchanges, new = merge_recording(
                record_dir / f"judge-{verifier.label}.jsonl", target, keep=mode == "new"
            )
            digest = sha256_file(target)
            outcome.cassettes[f"judge:{verifier.label}"] = {
                "path": str(target),
                "interactions": exchanges,
                "new": new,
                "sha256": digest,
            }
            pinned = verifier.judge.cassette.sha256
            if pinned and pinned != digest:
                stale[pinned] = digest
        outcome.repinned = [str(path) for path in _repin(loaded.path, stale)]
        outcome.spec_updated = bool(outcome.repinned)
        late = pin(loaded.path, missing_only=True)  # cassettes written now for the first time
        outcome.pinned = [
            f"{item.field}.sha256 {item.new}  {item.path}"
            for item in [*early.pins, *late.pins]
            if item.changed
        ]
        outcome.spec_updated = outcome.spec_updated or early.written or late.written
        warning = date_warning(findings, loaded.spec.time)
        if warning:
            outcome.warnings.append(warning)
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _repin(spec_path: Path, stale: dict[str, str]) -> list[Path]:
    """Each stale cassette hash replaced where it is pinned: the spec, or the base it extends
    (a variant, `--set` included, shares its base's cassettes and their pins); the files
    written."""
    from rlenv.spec_compose import chain

    written: list[Path] = []
    for path in chain(spec_path):
        text = path.read_text(encoding="utf-8")
        updated = text
        for old, new in stale.items():
            updated = updated.replace(old, new)
        if updated != text:
            atomic_write(path, updated.encode("utf-8"))
            written.append(path)
    return written


def _merge_mcp(
    loaded: LoadedSpec, name: str, record_dir: Path, target: Path, *, keep: bool
) -> dict[str, object]:
    """An MCP tool's recorded calls folded into its cassette (`rlenv.world.mcp`)."""
    from rlenv.world.mcp import merge_recording
    from rlenv.world.scrub import spec_scrubber

    calls, new = merge_recording(
        record_dir / f"{name}.mcp.jsonl", target, spec_scrubber(loaded), keep=keep
    )
    return {"path": str(target), "interactions": calls, "new": new, "sha256": sha256_file(target)}


def _services(loaded: LoadedSpec) -> contextlib.AbstractContextManager[dict[str, str]]:
    """The spec's services, started under libfaketime at the spec's instant (none: no-op)."""
    if not loaded.spec.services:
        return contextlib.nullcontext({})
    from rlenv.sandbox import faketime_env
    from rlenv.world.freeze import FROZEN_ENV

    # stopped, like freezegun's clock in the frozen world: a Date header or a timestamp is the
    # same in every recording, so re-recording gives the same bytes
    clock = faketime_env(loaded.spec.time.isoformat(), "UTC", stopped=True)
    if not clock:
        raise RunFailed(
            "libfaketime is not installed: the spec's services run under its frozen clock"
            " (Debian/Ubuntu: apt-get install faketime)"
        )
    return started_services(list(loaded.spec.services), loaded.root, {**FROZEN_ENV, **clock})


def _is_error(response: dict[str, object]) -> bool:
    status = response.get("status")
    code = status.get("code", 0) if isinstance(status, dict) else 0
    body = response.get("body")
    text = body.get("string") if isinstance(body, dict) else None
    return int(code or 0) >= 400 or not text


def _refuse_broken_recording(results: Path) -> None:
    """RunFailed when the recording did not see the world it was meant to record: a tool
    request that could not connect, a crashed policy or tool, a failed model endpoint."""
    crashed: list[str] = []
    unreachable: list[str] = []
    calls = rollouts = 0
    for record in iter_results(results):
        rollouts += 1
        where = f"input {record['input_id']}, rollout {record['rollout']}"
        for call in record.get("tool_calls") or []:
            calls += 1
            if call.get("unreachable"):
                unreachable.append(f"tool {call['name']!r} ({where}): {call.get('error')}")
        if record.get("status") in ("policy_error", "tool_error", "verifier_error", "infra_error"):
            frames = "".join(f"\n  at {frame}" for frame in record.get("traceback") or [])
            crashed.append(f"{record['status']} ({where}): {record.get('error')}{frames}")
    if unreachable:
        raise RunFailed(
            f"record: {len(unreachable)} of {calls} tool requests could not connect (is the"
            f" service running?); first: {unreachable[0]}; nothing written"
        )
    if crashed:
        raise RunFailed(
            f"record: {len(crashed)} of {rollouts} rollouts failed; first: {crashed[0]};"
            " nothing written"
        )


def pinned_hash_lines(result: RecordingResult) -> list[str]:
    lines = [
        f"{name}: {info['interactions']} interactions ({info['new']} new)"
        + (f", sha256 {info['sha256']}" if "sha256" in info else f" — {info.get('note')}")
        for name, info in sorted(result.cassettes.items())
    ]
    kept = {name: info.get("error_responses", 0) for name, info in result.cassettes.items()}
    kept = {name: count for name, count in kept.items() if count}
    if result.record_errors:
        counts = ", ".join(f"{name} {count}" for name, count in sorted(kept.items())) or "none"
        lines.append(
            f"error responses (HTTP >= 400, empty bodies) are recorded, scrubbed: {counts}"
            " (scrub: {record_errors: false} drops them)"
        )
    return lines
