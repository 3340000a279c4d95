"""`rlenv compare RUN_DIR...`: metrics of several runs (checkpoints) side by side."""

from pathlib import Path
from typing import Annotated

import typer


def _parse_steps(text: str | None) -> list[int] | None:
    from rlenv.errors import UserError

    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--steps {text!r}: expected integers separated by commas") from None


def _parse_human(values: list[str] | None) -> dict[str | Path, str] | None:
    from rlenv.errors import UserError

    if not values:
        return None
    pairs: dict[str | Path, str] = {}
    for value in values:
        run_dir, sep, labels = value.partition("=")
        if not sep or not run_dir or not labels:
            raise UserError(f"--human {value!r}: expected RUN_DIR=LABELS.jsonl")
        pairs[run_dir] = labels
    return pairs


def _echo_json(value: object) -> None:
    import json

    typer.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    """Add the `compare` command to the app (library imports stay inside the command)."""
    from rlenv.cli import handle_errors

    @app.command("compare")
    @handle_errors
    def compare(
        run_dirs: Annotated[
            list[Path],
            typer.Argument(metavar="RUN_DIR", help="Run directories in training-step order."),
        ],
        force: Annotated[
            bool, typer.Option("--force", help="Compare runs of different env fingerprints.")
        ] = False,
        out: Annotated[
            Path | None,
            typer.Option(
                "--out",
                metavar="DIR",
                help="Where compare.html goes (default: next to the last run).",
            ),
        ] = None,
        tensorboard: Annotated[
            Path | None,
            typer.Option(
                "--tensorboard",
                metavar="DIR",
                help="Also write TensorBoard event files (and a W&B"
                " offline run if wandb is installed) here.",
            ),
        ] = None,
        steps: Annotated[
            str | None,
            typer.Option(
                "--steps", metavar="N,N,...", help="Training step of each run, e.g. 100,200,300."
            ),
        ] = None,
        human: Annotated[
            list[str] | None,
            typer.Option(
                "--human",
                metavar="RUN_DIR=FILE",
                help="RUN_DIR=LABELS.jsonl human labels of a run (repeat).",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    ) -> None:
        """Compare runs of one env across checkpoints; flag reward hacking between them."""
        from rlenv.report.compare import compare as compare_runs
        from rlenv.report.compare import format_compare_table
        from rlenv.report.export import export_tensorboard, export_wandb

        result = compare_runs(
            run_dirs, force=force, out=out, human=_parse_human(human), steps=_parse_steps(steps)
        )
        exports = {}
        if tensorboard is not None:
            exports["tensorboard"] = export_tensorboard(result, tensorboard)
            exports["wandb"] = export_wandb(result, tensorboard)
        if as_json:
            _echo_json({**result, "exports": exports})
            return
        typer.echo(format_compare_table(result))
        if "tensorboard" in exports:
            board = exports["tensorboard"]
            typer.echo(
                f"tensorboard {board['tags']} scalars x {len(board['steps'])} steps in"
                f" {board['dir']}"
            )
            wandb = exports["wandb"]
            typer.echo(f"wandb    {wandb['dir'] if wandb['written'] else wandb['reason']}")
