"""`rlenv grade RUN_DIR`: run the verifiers a run deferred (library: rlenv.grade)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import JsonOpt, WeakSandboxOpt, handle_errors, print_json


@handle_errors
def grade(
    run_dir: Annotated[Path, typer.Argument(help="A run directory with deferred verifiers.")],
    no_grader_cache: Annotated[
        bool, typer.Option("--no-grader-cache", help="Do not reuse cached grades.")
    ] = False,
    allow_weak_sandbox: WeakSandboxOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the expensive verifiers a run deferred; rewrite its results and summary."""
    from rlenv.grade import grade as grade_run
    from rlenv.report.text import format_summary

    result = grade_run(
        run_dir, grader_cache=not no_grader_cache, allow_weak_sandbox=allow_weak_sandbox
    )
    if as_json:
        print_json({**result.summary, "graded": result.graded, "cache_hits": result.cache_hits})
        return
    typer.echo(f"graded {result.graded} rollouts ({result.cache_hits} grades from the cache)")
    typer.echo(format_summary(result.summary, run_dir))
