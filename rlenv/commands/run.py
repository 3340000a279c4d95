"""`rlenv run SPEC`: score a model in a frozen env (library: rlenv.runner.run)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import (
    BaselineOpt,
    BaseUrlOpt,
    ConcurrencyOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    RolloutsOpt,
    SetOpt,
    SpecArg,
    WeakSandboxOpt,
    fail,
    handle_errors,
    print_json,
    progress_bar,
    spec_with_sets,
)


class ExecutorName(StrEnum):
    local = "local"
    ray = "ray"


@handle_errors
def run(
    spec: SpecArg,
    sets: SetOpt = None,
    model: ModelOpt = None,
    rollouts: RolloutsOpt = None,
    limit: LimitOpt = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default runs/ENV/...).")] = None,
    concurrency: ConcurrencyOpt = 4,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Frozen-world worker processes the rollouts in flight share (default: one per"
            " core, at most --concurrency)."
        ),
    ] = None,
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
    ids: Annotated[
        str | None, typer.Option("--ids", help="Only these inputs: comma-separated ids.")
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--where", help="Only inputs whose FIELD equals VALUE (repeatable)."),
    ] = None,
    group_by: Annotated[
        str | None,
        typer.Option("--group-by", help="Also report pass rate and reward per value of FIELD."),
    ] = None,
    baseline: BaselineOpt = None,
    retry_errors: Annotated[
        bool,
        typer.Option("--retry-errors", help="With --resume: run the infra_error rollouts again."),
    ] = False,
    retry_timeouts: Annotated[
        bool,
        typer.Option("--retry-timeouts", help="With --resume: run the timeout rollouts again."),
    ] = False,
    retries: Annotated[
        int | None,
        typer.Option(min=0, help="API models: retries of a failed request (default 4)."),
    ] = None,
    request_timeout: Annotated[
        float | None,
        typer.Option(help="API models: seconds before one request times out (default 60)."),
    ] = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Score a model in a frozen env: every held-out input x K rollouts.

    Exit 1 (after writing results and summary) when the run could not produce the scores it
    promises: a flag with fails_run (infra errors, or the policy, the fixtures, a verifier or
    the reward model failing on more than half of the rollouts)."""
    from rlenv.sandbox.run import probe_mechanism_soon

    probe_mechanism_soon()  # the run records the sandbox it finds: probed while the spec loads
    spec = spec_with_sets(spec, sets)
    if resume and out is None:
        fail("--resume needs --out DIR (the run directory to continue)", 2)
    from rlenv.inputs import parse_where

    retry = ["infra_error"] * retry_errors + ["timeout"] * retry_timeouts
    from rlenv.runner import RunSettings
    from rlenv.runner import run as run_env

    chosen_ids = [part.strip() for part in ids.split(",") if part.strip()] if ids else None

    with progress_bar(not as_json, "rollouts") as advance:
        result = run_env(
            spec,
            RunSettings(
                model=model,
                rollouts=rollouts,
                limit=limit,
                out=out,
                concurrency=concurrency,
                workers=workers,
                resume=resume,
                base_url=base_url,
                reference=reference,
                expensive_fraction=expensive_fraction,
                defer_expensive=defer_expensive,
                grader_cache=not no_grader_cache,
                executor=executor.value,
                address=address,
                ids=chosen_ids,
                where=parse_where(where or []),
                group_by=group_by,
                baseline=baseline,
                retry=retry,
                retries=retries,
                request_timeout=request_timeout,
                allow_weak_sandbox=allow_weak_sandbox,
            ),
            progress=advance,
        )
    if as_json:
        print_json({**result.summary, "run_dir": str(result.run_dir)})
    else:  # the report imports numpy: not while the run goes (its BLAS threads, its memory)
        from rlenv.report.text import format_summary

        typer.echo(format_summary(result.summary, result.run_dir))
    if result.failures:
        first = result.failures[0]
        more = f" (and {len(result.failures) - 1} more flags)" if len(result.failures) > 1 else ""
        fail(
            f"the run could not produce the scores it promises: {first['name']}:"
            f" {first['message']}{more}; results and summary are in {result.run_dir}",
            1,
        )
