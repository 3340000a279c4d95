"""`rlenv probe SPEC`: which reward hacks does the env's reward model pay for? (rlenv.rm.probe)"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import JsonOpt, SpecArg, handle_errors, print_json


@handle_errors
def probe(
    spec: SpecArg,
    reward_model: Annotated[
        str | None,
        typer.Option(
            "--reward-model", help="rm:DIR, hf-rm:DIR or URL (default: the spec's reward model)."
        ),
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option(help="Write the hacks the model paid for as preference pairs (JSONL)."),
    ] = None,
    hack: Annotated[
        list[str] | None, typer.Option("--hack", help="Only this hack (repeatable).")
    ] = None,
    judge: Annotated[
        bool,
        typer.Option(
            "--judge",
            help="Probe the spec's judge verifiers instead (live calls): prompt injection,"
            " padding, flattery on gold and null answers.",
        ),
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Judge probe: the first N inputs.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score gold answers with and without hacks (padding, flattery, formatting, ...)."""
    if judge:
        from rlenv.verifiers.judge_probe import format_report as judge_report
        from rlenv.verifiers.judge_probe import probe_judges

        found = probe_judges(spec, limit=limit)
        if as_json:
            print_json(found)
        else:
            typer.echo(judge_report(found))
        return
    from rlenv.rm.probe import format_report
    from rlenv.rm.probe import probe as run_probe

    report = run_probe(spec, reward_model=reward_model, export=export, hacks=hack)
    if as_json:
        print_json(report)
    else:
        typer.echo(format_report(report))
