"""`rlenv import inspect|lm-eval`: a frozen spec from an Inspect AI task or an
lm-evaluation-harness YAML task (library: rlenv.importers)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from rlenv.commands._common import JsonOpt, handle_errors, print_json

OutOpt = Annotated[
    Path,
    typer.Option(
        "--out", help="Directory to write the spec, inputs and scorers into (new or empty)."
    ),
]


def _report(result: Any, as_json: bool) -> None:
    if as_json:
        print_json(result.as_json())
        return
    typer.echo(
        f"wrote {result.spec_path}: {result.inputs} inputs,"
        f" verifiers: {', '.join(result.verifiers)}"
    )
    for line in result.left_out:
        typer.echo(f"left out: {line}")
    typer.echo(f"next: rlenv validate {result.spec_path}")


@handle_errors
def inspect(
    task: Annotated[
        str, typer.Argument(help="FILE.py@TASK (an Inspect AI task).", show_default=False)
    ],
    out: OutOpt,
    python: Annotated[
        str | None,
        typer.Option(
            "--python",
            help="A python with inspect_ai (default: .venv-inspect/bin/python, else python3).",
        ),
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option("--judge-model", help="openai:NAME for model-graded scorers with no model."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Import an Inspect AI task: its dataset pinned as JSONL, its scorers as verifiers, its
    system message and prompt template; what cannot be carried over is listed, one line each."""
    from rlenv.importers import import_inspect

    _report(import_inspect(task, out, python=python, judge_model=judge_model), as_json)


@handle_errors
def lm_eval(
    task: Annotated[
        Path, typer.Argument(help="An lm-eval task YAML with local data files.", show_default=False)
    ],
    out: OutOpt,
    as_json: JsonOpt = False,
) -> None:
    """Import an lm-evaluation-harness YAML task (generate_until, local data files): its
    doc_to_text as the prompt template, doc_to_target as the gold, its exact_match metrics
    and regex filters as verifiers; what cannot be carried over is listed, one line each."""
    from rlenv.importers import import_lm_eval

    _report(import_lm_eval(task, out), as_json)
