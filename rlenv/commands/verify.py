"""`rlenv verify SPEC`: run the env N times and require identical results (rlenv.verify)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from rlenv.commands._common import (
    BaseUrlOpt,
    ConcurrencyOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    RolloutsOpt,
    SpecArg,
    handle_errors,
    print_json,
    progress_bar,
)

if TYPE_CHECKING:
    from rlenv.verify import Verification


@handle_errors
def verify(
    spec: SpecArg,
    runs: Annotated[int, typer.Option(min=2, help="How many identical runs to compare.")] = 2,
    model: ModelOpt = None,
    rollouts: RolloutsOpt = None,
    limit: LimitOpt = None,
    concurrency: ConcurrencyOpt = 4,
    base_url: BaseUrlOpt = None,
    perturb: Annotated[
        bool,
        typer.Option(
            "--perturb", help="Vary hash seed, TZ, locale, cwd, concurrency, listing order."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the env N times and require byte-identical results (exit 1 on divergence)."""
    from rlenv.verify import verify as verify_env

    with progress_bar(not as_json, "verify") as advance:
        result = verify_env(
            spec,
            runs=runs,
            model=model,
            rollouts=rollouts,
            limit=limit,
            concurrency=concurrency,
            base_url=base_url,
            progress=advance,
            perturb=perturb,
        )
    if as_json:
        print_json(
            {
                "identical": result.identical,
                "digests": result.digests,
                "runs": result.labels,
                "divergence": result.divergence,
            }
        )
    else:
        typer.echo(format_verdict(result))
    if not result.identical:
        raise typer.Exit(1)


def format_verdict(result: Verification) -> str:
    """`identical: ...` with what was varied, or where the first two runs diverged."""
    if result.identical:
        lines = [f"identical: {len(result.digests)} runs, digest {result.digests[0]}"]
        if result.labels and result.labels[0] == "reference":
            lines.append("perturbed: " + ", ".join(result.labels[1:]))
        elif result.labels:
            lines.append("grader cache: " + ", ".join(result.labels))
        return "\n".join(lines)
    div = result.divergence or {}
    first, second = div.get("runs", [1, 2])
    perturbation = f" (perturbation: {div['perturbation']})" if div.get("perturbation") else ""
    return (
        f"DIVERGED: digests {' '.join(digest[:12] for digest in result.digests)}\n"
        f"first divergence: input {div.get('input_id')!r} rollout {div.get('rollout')}"
        f" turn {div.get('turn')} field {div.get('field')}{perturbation}\n"
        f"  run {first}: {json.dumps(div.get('a'))[:300]}\n"
        f"  run {second}: {json.dumps(div.get('b'))[:300]}"
    )
