"""What the commands share: option types, error handling, the JSON printer, the progress bar.

Nothing here imports a library module at import time, so `rlenv --help` stays fast.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])
Advance = Callable[[int, int], None]

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
# upper bounds as in the library (rlenv.spec.MAX_ROLLOUTS, rlenv.runner.MAX_LIMIT and
# MAX_CONCURRENCY), repeated here so `rlenv --help` imports no library module
RolloutsOpt = Annotated[
    int | None, typer.Option(min=1, max=100_000, help="Rollouts per input (K).")
]
LimitOpt = Annotated[
    int | None, typer.Option(min=1, max=1_000_000_000, help="Only the first N inputs.")
]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, max=1024, help="Rollouts in flight at once.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a spec field (dotted key, YAML value), e.g. --set decoding.temperature=0.7;"
        " repeatable.",
    ),
]


def spec_with_sets(spec: Path, sets: list[str] | None) -> Path:
    """The spec to use: with ``--set`` pairs, the variant of it they make (rlenv.spec_compose)."""
    if not sets:
        return spec
    from rlenv.spec_compose import with_sets

    return with_sets(spec, sets)


BaselineOpt = Annotated[
    Path | None,
    typer.Option(
        "--baseline",
        metavar="RUN_DIR",
        help="Reference run of the same env (e.g. the SFT checkpoint): failing rollouts"
        " scored above its passing answers are suspects too.",
    ),
]
WeakSandboxOpt = Annotated[
    bool,
    typer.Option(
        "--allow-weak-sandbox",
        help="Let code verifiers run with resource limits only when no namespace sandbox works"
        " (same as RLENV_ALLOW_WEAK_SANDBOX=1): the model's code then sees the host.",
    ),
]


def fail(message: str, code: int) -> NoReturn:
    """Print `rlenv: error: MESSAGE` (one line on stderr) and exit with `code`."""
    typer.echo(f"rlenv: error: {message}", err=True)
    raise typer.Exit(code)


def fail_all(messages: list[str], code: int, *, as_json: bool = False) -> NoReturn:
    """One `rlenv: error:` line per problem on stderr; under --json also a JSON object on
    stdout, ``{"error": {"exit_code": N, "problems": [...]}}``, so a caller parsing stdout
    gets JSON whether the command worked or not."""
    if as_json:
        print_json({"error": {"exit_code": code, "problems": messages}})
    for message in messages:
        typer.echo(f"rlenv: error: {message}", err=True)
    raise typer.Exit(code)


def handle_errors(function: F) -> F:
    """Turn library errors into one line per problem on stderr and the documented exit code
    (and a JSON error object on stdout when the command was given --json)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rlenv.errors import Problems, RunFailed, UserError

        as_json = bool(kwargs.get("as_json"))
        try:
            return function(*args, **kwargs)
        except Problems as exc:
            fail_all(exc.lines, 2, as_json=as_json)
        except UserError as exc:
            fail_all([str(exc)], 2, as_json=as_json)
        except RunFailed as exc:
            fail_all([str(exc)], 1, as_json=as_json)
        except KeyboardInterrupt:
            fail_all(["interrupted"], 130, as_json=as_json)

    return wrapper  # type: ignore[return-value]


def print_json(value: Any) -> None:
    """The one JSON printer of the CLI: indented, sorted keys (the verdict first), UTF-8 kept
    as is."""
    from rlenv.report.common import json_text

    typer.echo(json_text(value))


@contextmanager
def progress_bar(enabled: bool, label: str) -> Iterator[Advance | None]:
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


def _print_version(value: bool) -> None:
    if value:
        from rlenv.version import __version__

        typer.echo(f"rlenv {__version__}")
        raise typer.Exit()


VersionOpt = Annotated[
    bool,
    typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
]


def app_options(version: VersionOpt = False) -> None:
    """Frozen RL test environments for language-model policies."""


# pydantic error types of a declared range (typer checks `min=`/`max=` with pydantic)
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}


def bad_parameter_line(error: typer.BadParameter) -> str:
    """One line for a bad option value; a declared range reads `--limit must be at least 1`."""
    errors = getattr(error.__cause__, "errors", None)  # a pydantic ValidationError's
    details = errors() if callable(errors) else []
    if details and details[0]["type"] in _BOUNDS and error.param is not None:
        key, words = _BOUNDS[details[0]["type"]]
        return f"{error.param.opts[0]} must be {words} {details[0]['ctx'][key]}"
    if details and details[0]["type"] == "value_error":  # a choice: drop pydantic's prefix
        reason = str(details[0]["ctx"]["error"])
        error = typer.BadParameter(reason, error.ctx, error.param, error.param_hint)
    return error.format_message()


def run_app(app: typer.Typer, args: list[str] | None = None) -> int:
    """Run the CLI on `args` (default: sys.argv) and return its exit code; a bad option value
    is one line, exit code 2."""
    try:
        result = app(args=args, prog_name="rlenv", standalone_mode=False)
    except typer.BadParameter as error:
        typer.echo(f"rlenv: error: {bad_parameter_line(error)}", err=True)
        return error.exit_code
    except typer.TyperException as error:  # other usage errors: one line and where to look
        if type(error).__name__ == "NoArgsIsHelpError":  # `rlenv` alone: the help text
            error.show()  # type: ignore[attr-defined]
            return getattr(error, "exit_code", 2)
        message = " ".join(error.format_message().split())  # type: ignore[attr-defined]
        context = getattr(error, "ctx", None)
        hint = f" (see `{context.command_path} --help`)" if context is not None else ""
        typer.echo(f"rlenv: error: {message}{hint}", err=True)
        return getattr(error, "exit_code", 2)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        return 1
    return result if isinstance(result, int) else 0
