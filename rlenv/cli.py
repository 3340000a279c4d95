"""The `rlenv` command: creates the app and registers the commands of rlenv/commands/.

Each command module parses its options, calls one library function and formats text or --json;
library modules are imported inside the commands so `rlenv --help` stays fast.
"""

from __future__ import annotations

import sys

import typer

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
from rlenv.commands._common import app_options, run_app

app = typer.Typer(
    name="rlenv",
    help="Frozen RL test environments for language-model policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.callback()(app_options)
app.command("run")(run.run)
app.command("verify")(verify.verify)
app.command("validate")(validate.validate)
app.command("record")(record.record)
app.command("grade")(grade.grade)
app.command("init")(init.init)
app.command("report")(report.report)
app.command("compare")(compare.compare)
app.command("probe")(probe.probe)
app.command("check")(check.check)
app.command("pin")(pin.pin)
app.command("schema")(schema.schema)
app.command("watch")(watch.watch)
app.command("serve")(serve.serve)

rm_app = typer.Typer(
    name="rm",
    help="Train and evaluate the held-out reward model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
rm_app.command("train")(rm.train)
rm_app.command("eval")(rm.evaluate)
rm_app.command("calibrate")(rm.calibrate)
app.add_typer(rm_app, name="rm")

import_app = typer.Typer(
    name="import",
    help="Write a frozen spec from an Inspect AI task or an lm-eval YAML task.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
import_app.command("inspect")(import_.inspect)
import_app.command("lm-eval")(import_.lm_eval)
app.add_typer(import_app, name="import")


def main() -> None:
    """Entry point of the `rlenv` console script."""
    sys.exit(run_app(app))


if __name__ == "__main__":
    main()
