"""`rlenv run SPEC`: score a model in a frozen env (library: rlenv.runner.run)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import (
    BaseUrlOpt,
    ConcurrencyOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    RolloutsOpt,
    SpecArg,
    WeakSandboxOpt,
    fail,
    handle_errors,
    print_json,
    progress_bar,
)


class ExecutorName(StrEnum):
    local = "local"
    ray = "ray"


@handle_errors
def run(
    spec: SpecArg,
    model: ModelOpt = None,
    rollouts: RolloutsOpt = None,
    limit: LimitOpt = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default runs/ENV/...).")] = None,
    concurrency: ConcurrencyOpt = 4,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out.")] = False,
    base_url: BaseUrlOpt = None,
    reference: Annotated[
        str | None, typer.Option(help="Base model for KL (hf:PATH), e.g. the SFT checkpoint.")
    ] = None,
    expensive_fraction: Annotated[
        float,
        typer.Option(
            min=0, max=1, help="Share of rollouts (seeded sample) that get expensive verifiers."
        ),
    ] = 1.0,
    defer_expensive: Annotated[
        bool, typer.Option("--defer-expensive", help="Leave expensive verifiers to `rlenv grade`.")
    ] = False,
    no_grader_cache: Annotated[
        bool, typer.Option("--no-grader-cache", help="Do not reuse cached expensive grades.")
    ] = False,
    executor: Annotated[
        ExecutorName, typer.Option(help="Where rollouts run: worker processes here, or Ray actors.")
    ] = ExecutorName.local,
    address: Annotated[
        str | None,
        typer.Option(help="Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: a new one)."),
    ] = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Score a model in a frozen env: every held-out input x K rollouts."""
    if resume and out is None:
        fail("--resume needs --out DIR (the run directory to continue)", 2)
    from rlenv.report.text import format_summary
    from rlenv.runner import run as run_env

    with progress_bar(not as_json, "rollouts") as advance:
        result = run_env(
            spec,
            model=model,
            rollouts=rollouts,
            limit=limit,
            out=out,
            concurrency=concurrency,
            resume=resume,
            base_url=base_url,
            progress=advance,
            reference=reference,
            expensive_fraction=expensive_fraction,
            defer_expensive=defer_expensive,
            grader_cache=not no_grader_cache,
            executor=executor.value,
            address=address,
            allow_weak_sandbox=allow_weak_sandbox,
        )
    if as_json:
        print_json({**result.summary, "run_dir": str(result.run_dir)})
    else:
        typer.echo(format_summary(result.summary, result.run_dir))
