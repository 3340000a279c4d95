"""`rlenv record`: run the policy with tools live once, and keep their HTTP as cassettes.

Secrets are scrubbed before anything is written; error responses are not kept unless the spec
asks; the spec's pinned cassette hashes are updated so `validate` passes afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlenv.canonical import sha256_file
from rlenv.errors import UserError
from rlenv.files import atomic_write
from rlenv.runner import run
from rlenv.spec import load_spec
from rlenv.world.replay import load_interactions


@dataclass
class RecordResult:
    cassettes: dict[str, dict[str, object]] = field(default_factory=dict)
    spec_updated: bool = False
    summary: dict[str, object] = field(default_factory=dict)


def record(
    spec_path: str | Path,
    *,
    model: str | None = None,
    mode: Literal["new", "all"] = "new",
    base_url: str | None = None,
    limit: int | None = None,
    rollouts: int | None = None,
) -> RecordResult:
    """Record every tool's HTTP while the policy runs; `mode="all"` re-records from scratch."""
    if mode not in ("new", "all"):
        raise UserError(f"--mode must be 'new' or 'all', got {mode!r}")
    loaded = load_spec(spec_path)
    tools = [tool for tool in loaded.spec.tools if tool.cassette is not None]
    if not tools:
        raise UserError("no tool in the spec names a cassette to record", where=str(loaded.path))
    scratch = Path(tempfile.mkdtemp(prefix="rlenv-record-"))
    try:
        record_dir = scratch / "cassettes"
        record_dir.mkdir()
        before: dict[str, int] = {}
        for tool in tools:
            target = loaded.cassette_path(tool)
            assert target is not None
            before[tool.name] = 0
            if mode == "new" and target.is_file():
                shutil.copyfile(target, record_dir / f"{tool.name}.yaml")
                before[tool.name] = len(load_interactions(target))
        result = run(
            spec_path,
            model=model,
            rollouts=rollouts,
            limit=limit,
            out=scratch / "run",
            base_url=base_url,
            record_dir=record_dir,
        )
        outcome = RecordResult(summary={"counts": result.summary["counts"]})
        text = loaded.path.read_text(encoding="utf-8")
        updated = text
        for tool in tools:
            target = loaded.cassette_path(tool)
            assert target is not None and tool.cassette is not None
            recorded = record_dir / f"{tool.name}.yaml"
            if not recorded.is_file():
                outcome.cassettes[tool.name] = {
                    "path": str(target),
                    "interactions": 0,
                    "new": 0,
                    "note": "no HTTP made; nothing written",
                }
                continue
            count = len(load_interactions(recorded))
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, recorded.read_bytes())
            digest = sha256_file(target)
            outcome.cassettes[tool.name] = {
                "path": str(target),
                "interactions": count,
                "new": count - before[tool.name],
                "sha256": digest,
            }
            if tool.cassette.sha256 and tool.cassette.sha256 != digest:
                updated = updated.replace(tool.cassette.sha256, digest)
        if updated != text:
            atomic_write(loaded.path, updated.encode("utf-8"))
            outcome.spec_updated = True
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def pinned_hash_lines(result: RecordResult) -> list[str]:
    return [
        f"{name}: {info['interactions']} interactions ({info['new']} new)"
        + (f", sha256 {info['sha256']}" if "sha256" in info else f" — {info.get('note')}")
        for name, info in sorted(result.cassettes.items())
    ]
