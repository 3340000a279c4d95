"""`rlenv --help` imports no command module (issue 30: `--help` <= 0.35 s), and the lazy app
shows the same help and runs the same commands as every command registered up front.

What `--help` loads is read from `sys.modules` in a fresh interpreter, not timed; the help
texts are compared with an app built the eager way (each command function registered with
typer), so a summary in rlenv.cli's table that drifts from its command's docstring fails here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
sys.argv = ["rlenv", *json.loads(sys.argv[1])]
from rlenv.cli import main
try:
    main()
except SystemExit:
    pass
print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

# what `rlenv --help` may load of rlenv: the app, the shared options, the version
LIGHT = {"rlenv", "rlenv.cli", "rlenv.commands", "rlenv.commands._common", "rlenv.version"}
HEAVY = ("pydantic", "yaml", "numpy", "httpx", "rich", "pygments", "vcr", "jinja2", "rfc8785")

# the commands of the CLI contract (DESIGN.md) and the rest `rlenv --help` lists, in its order
NAMES = [
    "run",
    "verify",
    "validate",
    "record",
    "grade",
    "init",
    "report",
    "compare",
    "probe",
    "check",
    "pin",
    "schema",
    "watch",
    "serve",
    "rm",
    "import",
]


def _loaded(arguments: list[str]) -> tuple[set[str], str]:
    """(modules loaded, what it printed) of `rlenv ARGS` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"},
    )
    *printed, line = result.stderr.splitlines()
    assert line.startswith("MODULES "), result.stderr[-3000:]
    return set(json.loads(line[len("MODULES ") :])), result.stdout + "\n".join(printed)


@pytest.mark.parametrize("arguments", [["--help"], [], ["--version"]])
def test_top_level_help_imports_no_command_module(arguments: list[str]) -> None:
    modules, stdout = _loaded(arguments)
    assert stdout.strip()
    ours = {name for name in modules if name == "rlenv" or name.startswith("rlenv.")}
    assert ours <= LIGHT, sorted(ours - LIGHT)
    heavy = sorted(name for name in modules if name.split(".")[0] in HEAVY)
    assert not heavy, heavy


def test_a_command_help_imports_that_command_only() -> None:
    modules, stdout = _loaded(["validate", "--help"])
    assert "Usage: rlenv validate" in stdout
    commands = {name for name in modules if name.startswith("rlenv.commands.")}
    assert commands == {"rlenv.commands._common", "rlenv.commands.validate"}


def _eager_app() -> typer.Typer:
    """The app as rlenv.cli built it before it was lazy: every command registered up front."""
    from rlenv.commands import (
        check,
        compare,
        grade,
        import_,
        init,
        pin,
        probe,
        record,
        report,
        rm,
        run,
        schema,
        serve,
        validate,
        verify,
        watch,
    )
    from rlenv.commands._common import app_options

    settings = {
        "no_args_is_help": True,
        "add_completion": False,
        "pretty_exceptions_enable": False,
        "rich_markup_mode": None,
    }
    app = typer.Typer(
        name="rlenv", help="Frozen RL test environments for language-model policies.", **settings
    )
    app.callback()(app_options)
    for name, function in [
        ("run", run.run),
        ("verify", verify.verify),
        ("validate", validate.validate),
        ("record", record.record),
        ("grade", grade.grade),
        ("init", init.init),
        ("report", report.report),
        ("compare", compare.compare),
        ("probe", probe.probe),
        ("check", check.check),
        ("pin", pin.pin),
        ("schema", schema.schema),
        ("watch", watch.watch),
        ("serve", serve.serve),
    ]:
        app.command(name)(function)
    rm_app = typer.Typer(
        name="rm", help="Train and evaluate the held-out reward model.", **settings
    )
    rm_app.command("train")(rm.train)
    rm_app.command("eval")(rm.evaluate)
    rm_app.command("calibrate")(rm.calibrate)
    app.add_typer(rm_app, name="rm")
    import_app = typer.Typer(
        name="import",
        help="Write a frozen spec from an Inspect AI task or an lm-eval YAML task.",
        **settings,
    )
    import_app.command("inspect")(import_.inspect)
    import_app.command("lm-eval")(import_.lm_eval)
    app.add_typer(import_app, name="import")
    return app


def _every_help() -> list[list[str]]:
    calls: list[list[str]] = [["--help"], []]
    calls += [[name, "--help"] for name in NAMES]
    calls += [["rm", sub, "--help"] for sub in ("train", "eval", "calibrate")]
    calls += [["import", sub, "--help"] for sub in ("inspect", "lm-eval")]
    return calls


@pytest.mark.parametrize("columns", ["80", "52"])
def test_every_help_text_is_the_eager_apps(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlenv.cli import app

    monkeypatch.setenv("COLUMNS", columns)
    eager = _eager_app()
    runner = CliRunner()
    for arguments in _every_help():
        lazy_result = runner.invoke(app, arguments, prog_name="rlenv")
        eager_result = runner.invoke(eager, arguments, prog_name="rlenv")
        assert lazy_result.output == eager_result.output, arguments
        assert lazy_result.exit_code == eager_result.exit_code, arguments
    listed = runner.invoke(app, ["--help"], prog_name="rlenv").output.split("Commands:")[1]
    assert [line.split()[0] for line in listed.strip().splitlines()] == NAMES


@pytest.mark.parametrize(
    "arguments",
    [["rnu", "x.yaml"], ["run"], ["run", "x.yaml", "--limit", "0"], ["rm"], ["rm", "tran"]],
)
def test_usage_errors_are_the_eager_apps(arguments: list[str]) -> None:
    """A misspelt command still gets typer's suggestion (it reads the group's command names)."""
    from rlenv.cli import app
    from rlenv.commands._common import run_app

    def outcome(application: typer.Typer) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = run_app(application, arguments)
        return code, err.getvalue()

    assert outcome(app) == outcome(_eager_app())
    if arguments[0] == "rnu":
        assert "Did you mean 'run'?" in outcome(app)[1]


def test_each_summary_is_its_commands_first_paragraph() -> None:
    """At any width the listing matches, not only at the widths compared above."""
    from rlenv.cli import COMMANDS, app

    group = typer.main.get_command(app)
    for name, (summary, _) in COMMANDS.items():
        help_text = group.commands[name].help or ""  # type: ignore[attr-defined]
        assert summary == " ".join(help_text.split("\n\n")[0].split()), name
