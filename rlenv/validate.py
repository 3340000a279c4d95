"""`rlenv validate`: schema, files, hashes, importable graders -- before any model time is spent."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlenv.env import load_environment


@dataclass
class Validation:
    name: str
    version: int
    fingerprint: str
    inputs: int
    tools: int
    verifiers: int
    files: dict[str, str]
    mcp_tools: dict[str, list[str]] = field(default_factory=dict)  # server -> its tools


def validate(spec_path: str | Path) -> Validation:
    """Check a spec end to end; raise a UserError (exit 2) on the first problem."""
    from rlenv.sandbox.mechanism import forced_mechanism

    forced_mechanism()  # RLENV_SANDBOX, as a run would read it
    prepared = load_environment(spec_path, purpose="validate")
    spec = prepared.loaded.spec
    from rlenv.world.mcp import check_mcp_servers

    return Validation(
        name=spec.name,
        version=spec.version,
        fingerprint=prepared.fingerprint,
        inputs=len(prepared.inputs),
        tools=len(spec.tools),
        verifiers=len(spec.verifiers),
        files=prepared.file_hashes,
        mcp_tools=check_mcp_servers(prepared.loaded),
    )
