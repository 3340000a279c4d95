"""`rlenv schema`: the env spec's JSON Schema, generated from the code (library: rlenv.spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import handle_errors, print_json


@handle_errors
def schema(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the schema to this file instead.")
    ] = None,
) -> None:
    """Print the JSON Schema of an env spec (for YAML editors: `# yaml-language-server:
    $schema=FILE`)."""
    import json

    from rlenv.files import atomic_write
    from rlenv.spec import json_schema

    if out is None:
        print_json(json_schema())
        return
    atomic_write(out, json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    typer.echo(f"wrote {out}")
