"""What both importers share: the output directory, the pinned inputs, the spec file with the
list of what was left out, the scorer module copied beside it."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlenv.canonical import sha256_file
from rlenv.errors import UserError

FROZEN_TIME = "2025-01-01T00:00:00+00:00"
"""The frozen instant of an imported env (neither harness has one; change it in the spec)."""
INPUTS_FILE = "inputs.jsonl"


@dataclass
class Imported:
    """An imported env: the spec document, its inputs, the modules written beside it, and one
    line per thing that could not be carried over (left out, never guessed)."""

    name: str
    spec: dict[str, Any]
    records: list[dict[str, Any]]
    modules: list[str] = field(default_factory=list)  # names of rlenv/importers/*.py to copy
    left_out: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)  # listed for `record`


@dataclass(frozen=True)
class ImportResult:
    spec_path: Path
    inputs: int
    verifiers: list[str]
    left_out: list[str]
    tools: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "spec": str(self.spec_path),
            "inputs": self.inputs,
            "verifiers": self.verifiers,
            "left_out": self.left_out,
            "tools": self.tools,
        }


def spec_name(text: str) -> str:
    """A spec `name` from a task name: letters, digits, `.`, `_`, `-`."""
    cleaned = re.sub(r"[^\w.-]+", "-", text).strip("-._") or "imported"
    return cleaned if cleaned[0].isalnum() else f"task-{cleaned}"


def unique_ids(ids: list[str], where: str) -> None:
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            raise UserError(f"sample id {item!r} appears twice", where=where)
        seen.add(item)


def _header(imported: Imported, source: str) -> str:
    lines = [f"# Imported by `rlenv import` from {source}.", "#"]
    if imported.left_out:
        lines.append("# Not carried over (left out):")
        lines += [f"#   - {line}" for line in imported.left_out]
    else:
        lines.append("# Everything the task declares was carried over.")
    return "\n".join(lines) + "\n"


def _tools_block(tools: list[dict[str, Any]]) -> str:
    """The task's tools as a commented `tools:` block: each needs a `function:` (and then
    `rlenv record`) before it can be part of the frozen world."""
    if not tools:
        return ""
    listed = yaml.safe_dump({"tools": tools}, sort_keys=False, allow_unicode=True, width=100)
    lines = [
        "",
        "# The task's tools, for `rlenv record`: give each a `function: module:name` that calls",
        "# the real API, uncomment, and record its cassette (`rlenv record SPEC`).",
    ]
    lines += [f"# {line}" for line in listed.splitlines()]
    return "\n".join(lines) + "\n"


def check_out(out: Path) -> None:
    """`--out` must not exist or be an empty directory (checked before any work, and again
    before writing)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory", where="--out")


def write_env(imported: Imported, out: Path, source: str) -> ImportResult:
    """Write the spec, the pinned inputs and the scorer modules into `out` (which must not
    exist or be empty); all or nothing."""
    check_out(out)
    parent = out.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        raise UserError(f"cannot create {out}: {exc.strerror}", where="--out") from None
    try:
        inputs = staging / INPUTS_FILE
        inputs.write_text(
            "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in imported.records),
            encoding="utf-8",
        )
        spec = dict(imported.spec)
        spec["inputs"] = {"path": INPUTS_FILE, "sha256": sha256_file(inputs)}
        ordered = {key: spec[key] for key in _ORDER if key in spec}
        ordered.update((key, value) for key, value in spec.items() if key not in ordered)
        body = yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=100)
        spec_path = staging / f"{imported.name}.yaml"
        spec_path.write_text(
            _header(imported, source) + body + _tools_block(imported.tools), encoding="utf-8"
        )
        here = Path(__file__).parent
        for module in imported.modules:
            shutil.copyfile(here / f"{module}.py", staging / f"{module}.py")
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ImportResult(
        spec_path=out / spec_path.name,
        inputs=len(imported.records),
        verifiers=[verifier.get("name", verifier["type"]) for verifier in spec["verifiers"]],
        left_out=list(imported.left_out),
        tools=[tool["name"] for tool in imported.tools],
    )


_ORDER = (
    "name",
    "version",
    "description",
    "seed",
    "time",
    "decoding",
    "system_prompt",
    "prompt",
    "inputs",
    "verifiers",
    "rollouts",
    "limits",
)
