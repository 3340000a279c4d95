"""`rlenv serve SPEC`: the frozen env as an OpenEnv environment server (library:
rlenv.serve)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import JsonOpt, SpecArg, handle_errors, print_json


@handle_errors
def serve(
    spec: SpecArg,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")] = 8000,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", min=1, max=65536, help="WebSocket sessions at once.")
    ] = 64,
    workers: Annotated[
        int | None,
        typer.Option(min=1, max=1024, help="Frozen-world worker processes (default: one per CPU)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory every finished episode is written to.")
    ] = None,
    model: Annotated[
        str,
        typer.Option(help="The policy's name, recorded as the records' model."),
    ] = "openenv",
    split: Annotated[
        str, typer.Option(help="Serve the held-out inputs (heldout) or the training ones (train).")
    ] = "heldout",
    as_json: JsonOpt = False,
) -> None:
    """Serve the env over the OpenEnv protocol (/reset /step /state /ws) until interrupted;
    every finished episode is a results line of the run directory (--out)."""
    from rlenv.serve import serve as serve_env

    def announce(url: str) -> None:
        typer.echo(f"rlenv serve: {spec} on {url} (episodes to {out or 'runs/'})", err=True)

    summary = serve_env(
        spec,
        out=out,
        host=host,
        port=port,
        max_sessions=max_sessions,
        workers=workers,
        model=model,
        split=split,
        announce=announce,
    )
    if as_json:
        print_json(summary)
    else:
        typer.echo(f"served {summary['rollouts']} episodes; digest {summary['digest']}")
