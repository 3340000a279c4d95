"""The `rlenv` command: creates the app and registers the commands of rlenv/commands/.

Each command module parses its options, calls one library function and formats text or --json.
A command's module is imported only when that command runs or shows its help: `rlenv --help`
lists every command from the summaries below (the first paragraph of each command's help,
checked against the command's docstring by tests/test_startup_cli.py) and loads typer and
rlenv.commands._common only (issue 30: `--help` <= 0.35 s).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from rlenv.commands._common import app_options, run_app

SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,
}


def _command(name: str) -> Callable[[], typer.Typer]:
    """A loader of one command: function `name` of rlenv.commands.`name`."""

    def load() -> typer.Typer:
        app = typer.Typer(**SETTINGS)
        app.command(name)(getattr(importlib.import_module(f"rlenv.commands.{name}"), name))
        return app

    return load


def _group(
    name: str, help_text: str, module: str, commands: dict[str, str]
) -> Callable[[], typer.Typer]:
    """A loader of a command group (`rlenv rm ...`): name -> function of rlenv.commands.`module`."""

    def load() -> typer.Typer:
        functions = importlib.import_module(f"rlenv.commands.{module}")
        group = typer.Typer(name=name, help=help_text, no_args_is_help=True, **SETTINGS)
        for command, function in commands.items():
            group.command(command)(getattr(functions, function))
        return group

    return load


RM_HELP = "Train and evaluate the held-out reward model."
IMPORT_HELP = "Write a frozen spec from an Inspect AI task or an lm-eval YAML task."

# name -> (summary `rlenv --help` lists, loader), in the order `rlenv --help` lists them
COMMANDS: dict[str, tuple[str, Callable[[], typer.Typer]]] = {
    "run": (
        "Score a model in a frozen env: every held-out input x K rollouts.",
        _command("run"),
    ),
    "verify": (
        "Run the env N times and require byte-identical results (exit 1 on divergence).",
        _command("verify"),
    ),
    "validate": (
        "Check schema, files, pinned hashes and importable graders; print the fingerprint.",
        _command("validate"),
    ),
    "record": (
        "Run the policy with tools live and write their HTTP into the spec's cassettes.",
        _command("record"),
    ),
    "grade": (
        "Run the expensive verifiers a run deferred; rewrite its results and summary.",
        _command("grade"),
    ),
    "init": (
        "Scaffold a working env: spec, helper package and pinned inputs.",
        _command("init"),
    ),
    "report": (
        "Write a self-contained HTML report of a run's diagnostics (report.html).",
        _command("report"),
    ),
    "compare": (
        "Compare runs of one env across checkpoints; flag reward hacking between them.",
        _command("compare"),
    ),
    "probe": (
        "Score gold answers with and without hacks (padding, flattery, formatting, ...).",
        _command("probe"),
    ),
    "check": (
        "Verify a run: each record against its digest, no duplicate or missing rollout, "
        "summary.json recomputed from the records, run.json against its seal. Exit 1 on "
        "tampering (or, with --against, on a difference), naming the first problem.",
        _command("check"),
    ),
    "pin": (
        "Pin the sha256 of the inputs, snapshot, cassettes and reward-model data in the spec, "
        "all at once, editing only the hash values (comments and layout are kept).",
        _command("pin"),
    ),
    "schema": (
        "Print the JSON Schema of an env spec (for YAML editors: `# yaml-language-server: "
        "$schema=FILE`).",
        _command("schema"),
    ),
    "watch": (
        "Evaluate every checkpoint-N in OUTPUT_DIR with the held-out env as it appears (TRL, "
        "verl, OpenRLHF): one run directory per step, rlenv/... scalars in TensorBoard.",
        _command("watch"),
    ),
    "serve": (
        "Serve the env over the OpenEnv protocol (/reset /step /state /ws) until interrupted; "
        "every finished episode is a results line of the run directory (--out).",
        _command("serve"),
    ),
    "rm": (
        RM_HELP,
        _group(
            "rm", RM_HELP, "rm", {"train": "train", "eval": "evaluate", "calibrate": "calibrate"}
        ),
    ),
    "import": (
        IMPORT_HELP,
        _group("import", IMPORT_HELP, "import_", {"inspect": "inspect", "lm-eval": "lm_eval"}),
    ),
}


class _Commands(MutableMapping[str, Any]):
    """The group's commands by name; a command is built (its module imported) when looked up."""

    def __init__(self, group: LazyGroup) -> None:
        self.group = group
        self.built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            _, load = COMMANDS[name]  # KeyError for an unknown name, as a dict's
            command = typer.main.get_command(load())
            command.name = name
            self.built[name] = command
        return self.built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        raise TypeError("rlenv's commands are listed in rlenv.cli.COMMANDS")

    def __delitem__(self, name: str) -> None:
        raise TypeError("rlenv's commands are listed in rlenv.cli.COMMANDS")

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class LazyGroup(TyperGroup):
    """The root group: lists every command without importing any; builds one when it runs or
    shows its help."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands(self)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Typer's listing, each command's short help made from its summary (as the built
        command makes it from its help's first paragraph) unless it is built already."""
        built = self.commands.built  # type: ignore[attr-defined]
        listed = {
            name: built.get(name) or TyperCommand(name=name, help=summary)
            for name, (summary, _) in COMMANDS.items()
        }
        shown = {name: command for name, command in listed.items() if not command.hidden}
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name in shown)
        rows = [(name, command.get_short_help_str(limit)) for name, command in shown.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="rlenv",
    help="Frozen RL test environments for language-model policies.",
    no_args_is_help=True,
    cls=LazyGroup,
    **SETTINGS,
)
app.callback()(app_options)


def main() -> None:
    """Entry point of the `rlenv` console script."""
    sys.exit(run_app(app))


if __name__ == "__main__":
    main()
