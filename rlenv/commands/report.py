"""`rlenv report RUN_DIR`: write report.html and metrics.json (library: rlenv.report.html)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import BaselineOpt, JsonOpt, handle_errors, print_json


@handle_errors
def report(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="Run directory (holds results.jsonl).")
    ],
    human: Annotated[
        Path | None,
        typer.Option(
            "--human", metavar="FILE", help="Human labels JSONL: {input_id, rollout, score} lines."
        ),
    ] = None,
    baseline: BaselineOpt = None,
    group_by: Annotated[
        str | None,
        typer.Option(
            "--group-by",
            metavar="FIELD",
            help="Pass rate and reward per value of this input field (default: the run's own"
            " --group-by).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a self-contained HTML report of a run's diagnostics (report.html)."""
    from rlenv.report.common import format_errors, format_flags
    from rlenv.report.html import report_run

    result = report_run(run_dir, human=human, baseline=baseline, group_by=group_by)
    if as_json:
        print_json(result)
        return
    from rlenv.metrics.verdict import headline

    typer.echo(headline(result["verdict"]))
    for warning in result["warnings"]:
        typer.echo(f"WARNING  {warning}")
    for index, line in enumerate(format_errors(result["errors"])):
        typer.echo(("errors   " if index == 0 else "         ") + line)
    for flag, line in zip(result["flags"], format_flags(result["flags"]), strict=True):
        typer.echo(f"{'NOTE' if flag.get('kind') == 'note' else 'FLAG'}     {line}")
    typer.echo(f"suspects {len(result['suspects'])} (high reward, failing verifiers)")
    collapsed = result["collapsed_inputs"]
    if collapsed:
        shown = ", ".join(collapsed[:10]) + (" ..." if len(collapsed) > 10 else "")
        typer.echo(f"collapsed {len(collapsed)} inputs: {shown}")
    groups = result.get("groups")
    if groups:
        for value, group in groups.items():
            if value != "field":
                rate = group["pass_rate"].get("value")
                shown = "-" if rate is None else f"{rate:.3f}"
                n = group["rollouts"]
                typer.echo(f"group    {groups['field']}={value}: pass {shown}, n={n}")
    typer.echo(f"report   {result['report']}")
    typer.echo(f"metrics  {result['metrics']}")
