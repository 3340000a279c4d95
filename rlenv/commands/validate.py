"""`rlenv validate SPEC`: check an env and print its fingerprint (library: rlenv.validate)."""

from __future__ import annotations

import typer

from rlenv.commands._common import (
    JsonOpt,
    SetOpt,
    SpecArg,
    handle_errors,
    print_json,
    spec_with_sets,
)


@handle_errors
def validate(spec: SpecArg, as_json: JsonOpt = False, sets: SetOpt = None) -> None:
    """Check schema, files, pinned hashes and importable graders; print the fingerprint."""
    spec = spec_with_sets(spec, sets)
    from dataclasses import asdict

    from rlenv.validate import validate as validate_env

    result = validate_env(spec)
    if as_json:
        print_json(asdict(result))
    else:
        typer.echo(
            f"ok: {result.name} v{result.version}: {result.inputs} inputs, {result.tools} tools,"
            f" {result.verifiers} verifiers\nfingerprint {result.fingerprint}"
        )
        for server, names in sorted(result.mcp_tools.items()):
            typer.echo(f"MCP server {server}: tools {', '.join(names)}")
