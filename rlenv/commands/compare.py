"""`rlenv compare RUN_DIR...`: runs (checkpoints) side by side (library: rlenv.report.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from rlenv.commands._common import BaselineOpt, JsonOpt, handle_errors, print_json


class Steps(list[int]):
    """The training step of each compared run, from `--steps 100,200,300`."""


class HumanLabels(NamedTuple):
    """A run directory and its human labels, from `--human RUN_DIR=LABELS.jsonl`."""

    run_dir: str
    labels: str


def parse_steps(text: str) -> Steps:
    try:
        return Steps(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected integers separated by commas") from None


def parse_human(text: str) -> HumanLabels:
    run_dir, sep, labels = text.partition("=")
    if not sep or not run_dir or not labels:
        raise typer.BadParameter(f"{text!r}: expected RUN_DIR=LABELS.jsonl")
    return HumanLabels(run_dir, labels)


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
            "--out", metavar="DIR", help="Where compare.html goes (default: next to the last run)."
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
        Steps | None,
        typer.Option(
            "--steps",
            metavar="N,N,...",
            parser=parse_steps,
            help="Training step of each run, e.g. 100,200,300.",
        ),
    ] = None,
    human: Annotated[
        list[HumanLabels] | None,
        typer.Option(
            "--human",
            metavar="RUN_DIR=FILE",
            parser=parse_human,
            help="RUN_DIR=LABELS.jsonl human labels of a run (repeat).",
        ),
    ] = None,
    baseline: BaselineOpt = None,
    inspect: Annotated[
        int | None,
        typer.Option(
            "--inspect",
            metavar="N",
            min=0,
            help="Generations side by side: N seeded inputs plus changed verdicts and top"
            " suspects (HTML always, default 20; given, also printed as a table).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the --inspect sample.")] = 0,
    stage_names: Annotated[
        str | None,
        typer.Option(
            "--labels",
            metavar="NAME,NAME,...",
            help="Stage names of the runs, e.g. sft,rl-100,rl-200 (default: directory names).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare runs of one env across checkpoints; flag reward hacking between them."""
    from rlenv.report.compare import compare as compare_runs
    from rlenv.report.compare import format_compare_table, format_generations
    from rlenv.report.export import export_tensorboard, export_wandb

    human_files: dict[str | Path, str] | None = (
        {pair.run_dir: pair.labels for pair in human} if human else None
    )
    result = compare_runs(
        run_dirs,
        force=force,
        out=out,
        human=human_files,
        steps=steps,
        baseline=baseline,
        inspect=20 if inspect is None else inspect,
        seed=seed,
        labels=[part.strip() for part in stage_names.split(",")] if stage_names else None,
    )
    exports: dict[str, Any] = {}
    if tensorboard is not None:
        exports["tensorboard"] = export_tensorboard(result, tensorboard)
        exports["wandb"] = export_wandb(result, tensorboard)
    if as_json:
        print_json({**result, "exports": exports})
        return
    typer.echo(format_compare_table(result))
    if inspect is not None:
        typer.echo(format_generations(result))
    if exports:
        board, wandb = exports["tensorboard"], exports["wandb"]
        typer.echo(
            f"tensorboard {board['tags']} scalars x {len(board['steps'])} steps in {board['dir']}"
        )
        typer.echo(f"wandb    {wandb['dir'] if wandb['written'] else wandb['reason']}")
