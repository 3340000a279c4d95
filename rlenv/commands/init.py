"""`rlenv init NAME`: scaffold a working env (library: rlenv.scaffold)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import handle_errors


@handle_errors
def init(
    name: Annotated[str, typer.Argument(help="Env name (lower case, digits, underscores).")],
    root: Annotated[
        Path, typer.Option(help="Project directory holding envs/ and fixtures/.")
    ] = Path("."),
) -> None:
    """Scaffold a working env: spec, helper package and pinned inputs."""
    from rlenv.scaffold import scaffold

    for path in scaffold(name, root):
        typer.echo(f"created {path}")
    typer.echo(f"next: rlenv validate {root / 'envs' / (name + '.yaml')}")
