"""`rlenv watch OUTPUT_DIR --env SPEC`: evaluate each checkpoint a trainer saves (library:
rlenv.watch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import JsonOpt, LimitOpt, RolloutsOpt, handle_errors, print_json


@handle_errors
def watch(
    output_dir: Annotated[
        Path, typer.Argument(metavar="OUTPUT_DIR", help="The trainer's output directory.")
    ],
    env: Annotated[Path, typer.Option("--env", help="The held-out env spec.")],
    out: Annotated[
        Path | None, typer.Option(help="Where the step-N runs go (default OUTPUT_DIR/rlenv).")
    ] = None,
    reference: Annotated[
        Path | None, typer.Option(help="Initial model directory: the KL reference.")
    ] = None,
    limit: LimitOpt = None,
    rollouts: RolloutsOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Evaluate what is there, then stop.")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between polls.")] = 30.0,
    settle: Annotated[
        float, typer.Option(min=0, help="A checkpoint unchanged this long is complete.")
    ] = 5.0,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate every checkpoint-N in OUTPUT_DIR with the held-out env as it appears (TRL,
    verl, OpenRLHF): one run directory per step, rlenv/... scalars in TensorBoard."""
    from rlenv.watch import Evaluation
    from rlenv.watch import watch as watch_dir

    def show(evaluation: Evaluation) -> None:
        if as_json:
            return
        from rlenv.metrics.verdict import headline

        scalars = evaluation.scalars
        verdict = evaluation.verdict or {}
        status = "reference" if verdict.get("is_reference") else verdict.get("status", "-")
        typer.echo(
            f"step {evaluation.step}: {status}"
            f"  pass {scalars.get('rlenv/pass_rate', float('nan')):.3f}  {evaluation.run_dir}"
            + ("  (already evaluated)" if evaluation.reused else f"  {evaluation.seconds:.1f}s")
        )
        if evaluation.series is not None and not verdict.get("is_reference"):
            typer.echo(f"  run so far: {headline(evaluation.series)}")

    def note(text: str) -> None:
        typer.echo(f"rlenv watch: {text}", err=True)

    results = watch_dir(
        output_dir,
        env,
        out=out,
        reference=reference,
        limit=limit,
        rollouts=rollouts,
        once=once,
        interval=interval,
        settle=settle,
        on_result=show,
        on_note=note,
    )
    if as_json:
        print_json(
            [
                {
                    "step": e.step,
                    "run_dir": str(e.run_dir),
                    "seconds": e.seconds,
                    "verdict": e.verdict,
                    **e.scalars,
                }
                for e in results
            ]
        )
