"""The `rlenv` command: each command parses options, calls one library function, formats output.

Library modules are imported inside the commands so `rlenv --help` stays fast.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

app = typer.Typer(
    name="rlenv",
    help="Frozen RL test environments for language-model policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    typer.echo(f"rlenv: error: {message}", err=True)
    raise typer.Exit(code)


def handle_errors(function: F) -> F:
    """Turn library errors into one line on stderr and the documented exit code."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rlenv.errors import RunFailed, UserError

        try:
            return function(*args, **kwargs)
        except UserError as exc:
            _fail(str(exc), 2)
        except RunFailed as exc:
            _fail(str(exc), 1)
        except KeyboardInterrupt:
            _fail("interrupted", 130)

    return wrapper  # type: ignore[return-value]


@contextmanager
def progress_bar(enabled: bool, label: str) -> Any:
    """A rich progress bar on a terminal; nothing under --json or when stderr is not a TTY."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        f"[bold]{label}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


SpecArg = Annotated[Path, typer.Argument(help="Env spec (YAML).", show_default=False)]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model URI: python:pkg.mod:fn, replay:FILE, openai:NAME, hf:PATH."
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible server URL (or OPENAI_BASE_URL)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


class ExecutorName(StrEnum):
    local = "local"
    ray = "ray"


@app.command()
@handle_errors
def run(
    spec: SpecArg,
    model: ModelOpt = None,
    rollouts: Annotated[int | None, typer.Option(help="Rollouts per input (K).")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N inputs.")] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default runs/ENV/...).")] = None,
    concurrency: Annotated[int, typer.Option(help="Rollouts in flight at once.")] = 4,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out.")] = False,
    base_url: BaseUrlOpt = None,
    reference: Annotated[
        str | None, typer.Option(help="Base model for KL (hf:PATH), e.g. the SFT checkpoint.")
    ] = None,
    expensive_fraction: Annotated[
        float, typer.Option(help="Share of rollouts (seeded sample) that get expensive verifiers.")
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
    as_json: JsonOpt = False,
) -> None:
    """Score a model in a frozen env: every held-out input x K rollouts."""
    from rlenv.report_text import format_summary
    from rlenv.runner import run as run_env

    if resume and out is None:
        _fail("--resume needs --out DIR (the run directory to continue)", 2)
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
        )
    if as_json:
        _print_json({**result.summary, "run_dir": str(result.run_dir)})
    else:
        typer.echo(format_summary(result.summary, result.run_dir))


@app.command()
@handle_errors
def verify(
    spec: SpecArg,
    runs: Annotated[int, typer.Option(help="How many identical runs to compare.")] = 2,
    model: ModelOpt = None,
    rollouts: Annotated[int | None, typer.Option(help="Rollouts per input (K).")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N inputs.")] = None,
    concurrency: Annotated[int, typer.Option(help="Rollouts in flight at once.")] = 4,
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
        _print_json(
            {
                "identical": result.identical,
                "digests": result.digests,
                "runs": result.labels,
                "divergence": result.divergence,
            }
        )
    elif result.identical:
        typer.echo(f"identical: {len(result.digests)} runs, digest {result.digests[0]}")
        if result.labels and result.labels[0] == "reference":
            typer.echo("perturbed: " + ", ".join(result.labels[1:]))
        elif result.labels:
            typer.echo("grader cache: " + ", ".join(result.labels))
    else:
        div = result.divergence or {}
        typer.echo(
            f"DIVERGED: digests {' '.join(digest[:12] for digest in result.digests)}\n"
            f"first divergence: input {div.get('input_id')!r} rollout {div.get('rollout')}"
            f" turn {div.get('turn')} field {div.get('field')}"
            + (f" (perturbation: {div['perturbation']})" if div.get("perturbation") else "")
            + "\n"
            f"  run {div.get('runs', [1, 2])[0]}: {json.dumps(div.get('a'))[:300]}\n"
            f"  run {div.get('runs', [1, 2])[1]}: {json.dumps(div.get('b'))[:300]}"
        )
    if not result.identical:
        raise typer.Exit(1)


@app.command()
@handle_errors
def validate(spec: SpecArg, as_json: JsonOpt = False) -> None:
    """Check schema, files, pinned hashes and importable graders; print the fingerprint."""
    from dataclasses import asdict

    from rlenv.validate import validate as validate_env

    result = validate_env(spec)
    if as_json:
        _print_json(asdict(result))
    else:
        typer.echo(
            f"ok: {result.name} v{result.version}: {result.inputs} inputs, {result.tools} tools,"
            f" {result.verifiers} verifiers\nfingerprint {result.fingerprint}"
        )


@app.command()
@handle_errors
def record(
    spec: SpecArg,
    model: ModelOpt = None,
    mode: Annotated[str, typer.Option(help="new: add unseen requests; all: re-record.")] = "new",
    limit: Annotated[int | None, typer.Option(help="Only the first N inputs.")] = None,
    rollouts: Annotated[int | None, typer.Option(help="Rollouts per input (K).")] = None,
    base_url: BaseUrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the policy with tools live and write their HTTP into the spec's cassettes."""
    from dataclasses import asdict

    from rlenv.record import pinned_hash_lines
    from rlenv.record import record as record_env

    result = record_env(
        spec,
        model=model,
        mode=mode,  # type: ignore[arg-type]  # checked by record()
        base_url=base_url,
        limit=limit,
        rollouts=rollouts,
    )
    if as_json:
        _print_json(asdict(result))
        return
    for line in pinned_hash_lines(result):
        typer.echo(line)
    if result.spec_updated:
        typer.echo(f"updated pinned cassette hashes in {spec}")


@app.command()
@handle_errors
def grade(
    run_dir: Annotated[Path, typer.Argument(help="A run directory with deferred verifiers.")],
    no_grader_cache: Annotated[
        bool, typer.Option("--no-grader-cache", help="Do not reuse cached grades.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the expensive verifiers a run deferred; rewrite its results and summary."""
    from rlenv.grade import grade as grade_run
    from rlenv.report_text import format_summary

    result = grade_run(run_dir, grader_cache=not no_grader_cache)
    if as_json:
        _print_json({**result.summary, "graded": result.graded, "cache_hits": result.cache_hits})
        return
    typer.echo(f"graded {result.graded} rollouts ({result.cache_hits} grades from the cache)")
    typer.echo(format_summary(result.summary, run_dir))


@app.command()
@handle_errors
def init(
    name: Annotated[str, typer.Argument(help="Env name (lower case, digits, underscores).")],
    root: Annotated[
        Path, typer.Option(help="Project directory holding envs/ and fixtures/.")
    ] = Path("."),
) -> None:
    """Scaffold a working env: spec, helper package and pinned inputs."""
    from rlenv.scaffold import scaffold

    for path in scaffold(name, root):
        typer.echo(f"created {path}")
    typer.echo(f"next: rlenv validate {root / 'envs' / (name + '.yaml')}")


def _register_commands() -> None:
    """Commands that live in their own modules (rlenv/commands/NAME.py)."""
    from rlenv.commands import compare as compare_command
    from rlenv.commands import report as report_command

    report_command.register(app)
    compare_command.register(app)
    from rlenv.commands import probe as probe_command
    from rlenv.commands import rm as rm_command

    rm_command.register(app)
    probe_command.register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
