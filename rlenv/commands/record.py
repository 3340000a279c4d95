"""`rlenv record SPEC`: record the tools' HTTP into cassettes (library: rlenv.recording)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from rlenv.commands._common import (
    BaseUrlOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    RolloutsOpt,
    SetOpt,
    SpecArg,
    handle_errors,
    print_json,
    spec_with_sets,
)


class RecordMode(StrEnum):
    new = "new"
    all = "all"


@handle_errors
def record(
    spec: SpecArg,
    sets: SetOpt = None,
    model: ModelOpt = None,
    mode: Annotated[
        RecordMode, typer.Option(help="new: add unseen requests; all: re-record.")
    ] = RecordMode.new,
    limit: LimitOpt = None,
    rollouts: RolloutsOpt = None,
    base_url: BaseUrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the policy with tools live and write their HTTP into the spec's cassettes."""
    spec = spec_with_sets(spec, sets)
    from dataclasses import asdict

    from rlenv.recording import pinned_hash_lines
    from rlenv.recording import record as record_env

    result = record_env(
        spec, model=model, mode=mode.value, base_url=base_url, limit=limit, rollouts=rollouts
    )
    if as_json:
        for warning in result.warnings:
            typer.echo(warning, err=True)
        print_json(asdict(result))
        return
    for name, url in sorted(result.services.items()):
        typer.echo(f"service {name}: started under the frozen clock, recorded as {url}")
    for line in pinned_hash_lines(result):
        typer.echo(line)
    for warning in result.warnings:
        typer.echo(warning, err=True)
    for line in result.pinned:
        typer.echo(f"pinned {line}")
    for path in result.repinned:  # a --set variant's hashes are its base's
        typer.echo(f"updated pinned hashes in {path}")
    if result.spec_updated and not result.repinned:
        typer.echo(f"updated pinned hashes in {spec}")
