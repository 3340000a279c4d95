"""`rlenv report RUN_DIR`: write report.html and metrics.json into a run directory."""

from pathlib import Path
from typing import Annotated

import typer


def _echo_json(value: object) -> None:
    import json

    typer.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    """Add the `report` command to the app (library imports stay inside the command)."""
    from rlenv.cli import handle_errors

    @app.command("report")
    @handle_errors
    def report(
        run_dir: Annotated[
            Path, typer.Argument(metavar="RUN_DIR", help="Run directory (holds results.jsonl).")
        ],
        human: Annotated[
            Path | None,
            typer.Option(
                "--human",
                metavar="FILE",
                help="Human labels JSONL: {input_id, rollout, score} lines.",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    ) -> None:
        """Write a self-contained HTML report of a run's diagnostics (report.html)."""
        from rlenv.report.common import format_flags
        from rlenv.report.html import report_run

        result = report_run(run_dir, human=human)
        if as_json:
            _echo_json(result)
            return
        for warning in result["warnings"]:
            typer.echo(f"WARNING  {warning}")
        for line in format_flags(result["flags"]):
            typer.echo(f"FLAG     {line}")
        typer.echo(f"suspects {len(result['suspects'])} (high reward, failing verifiers)")
        typer.echo(f"report   {result['report']}")
        typer.echo(f"metrics  {result['metrics']}")
