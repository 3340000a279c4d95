"""`rlenv check RUN_DIR [--against OTHER_RUN]`: verify a run directory's integrity, or that two
runs have the same outcomes (library: rlenv.audit)."""

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
    against: Annotated[
        Path | None,
        typer.Option(
            "--against",
            metavar="OTHER_RUN",
            help="Another run of the same policy outputs (e.g. on another machine): same"
            " outcomes, and model scores within 1e-6, or the first difference.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify a run: each record against its digest, no duplicate or missing rollout,
    summary.json recomputed from the records, run.json against its seal. Exit 1 on tampering
    (or, with --against, on a difference), naming the first problem."""
    from rlenv.audit import TamperedRun, audit_against, audit_run

    if against is not None:
        try:
            compared = audit_against(run_dir, against)
        except TamperedRun as exc:
            fail(str(exc), 1)
        if as_json:
            print_json(compared.as_dict())
        if not compared.ok:
            fail(compared.message, 1)
        if not as_json:
            typer.echo(compared.message)
            typer.echo(f"outcome  {compared.outcome_digests[0]}")
        return
    result = audit_run(run_dir)
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
    typer.echo(f"outcome  {result.outcome_digest}")
