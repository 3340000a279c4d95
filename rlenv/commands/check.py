"""`rlenv check RUN_DIR`: verify a run directory's integrity (library: rlenv.check)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import JsonOpt, fail, handle_errors, print_json


@handle_errors
def check(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="Run directory (holds results.jsonl).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Verify a run: each record against its digest, no duplicate or missing rollout, and
    summary.json against the records. Exit 1 on tampering, naming the first problem."""
    from rlenv.check import check_run

    result = check_run(run_dir)
    if as_json:
        print_json(result.as_dict())
        if not result.ok:
            typer.echo(f"rlenv: error: {result.problems[0]}", err=True)
            raise typer.Exit(1)
        return
    if not result.ok:
        fail(result.problems[0], 1)
    typer.echo(f"ok       {result.records} records match their digests and summary.json")
    typer.echo(f"digest   {result.digest}")
