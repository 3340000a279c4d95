"""`rlenv pin SPEC`: write every missing or stale hash into the spec (library: rlenv.pin)."""

from __future__ import annotations

from typing import Annotated

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
def pin(
    spec: SpecArg,
    sets: SetOpt = None,
    check_only: Annotated[
        bool,
        typer.Option("--check", help="Change nothing; exit 1 when a hash is missing or stale."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Pin the sha256 of the inputs, snapshot, cassettes and reward-model data in the spec, all
    at once, editing only the hash values (comments and layout are kept)."""
    spec = spec_with_sets(spec, sets)
    from dataclasses import asdict

    from rlenv.pin import pin as pin_spec

    result = pin_spec(spec, check_only=check_only)
    stale = [item for item in result.pins if item.changed]
    if as_json:
        print_json(
            {
                "spec": str(result.spec),
                "written": result.written,
                "pins": [asdict(item) | {"changed": item.changed} for item in result.pins],
                "waiting": result.waiting,
            }
        )
    else:
        for item in result.pins:
            if not item.changed:
                state = "ok     "
            elif check_only:
                state = "stale  " if item.old else "missing"
            else:
                state = "pinned "
            was = f" (was {item.old[:12]}…)" if item.changed and item.old else ""
            typer.echo(f"{state} {item.field}.sha256 {item.new}{was}  {item.path}")
        for note in result.waiting:
            typer.echo(f"waiting {note}")
        if result.written:
            typer.echo(f"wrote {result.spec}: {len(stale)} hash(es); run `rlenv validate`")
        elif not stale:
            typer.echo(f"{result.spec}: every hash is pinned and current")
    if check_only and stale:
        raise typer.Exit(1)
