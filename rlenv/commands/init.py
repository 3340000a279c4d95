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
    kind: Annotated[
        str,
        typer.Option(
            help="basic (a question and a tool) or agent (a simulated user, tools over an"
            " SQLite snapshot and an HTTP service, graded by sqlite_state)."
        ),
    ] = "basic",
) -> None:
    """Scaffold a working env: spec, helper package and pinned inputs."""
    from rlenv.scaffold import scaffold

    for path in scaffold(name, root, kind):
        typer.echo(f"created {path}")
    spec = root / "envs" / (name + ".yaml")
    if kind == "agent":  # its service's HTTP is recorded first (record pins the cassette)
        typer.echo(f"next: rlenv record {spec}, then rlenv validate {spec} and rlenv run {spec}")
    else:
        typer.echo(f"next: rlenv validate {spec}")
