"""`rlenv init NAME [--kind basic|agent]`: a working env to start from (spec, helper package,
inputs, pinned hashes), rendered from the jinja2 templates in `rlenv/templates/init/KIND/`.

- ``basic``: a question, an `add` tool, a numeric verifier.
- ``agent``: a simulated customer (a python user), tools over a tiny SQLite snapshot and a
  small HTTP service started by `services:` (its HTTP recorded by `rlenv record`, which pins
  the cassette it writes), graded row by row by `sqlite_state`.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from rlenv.canonical import sha256_file
from rlenv.errors import UserError

KINDS = ("basic", "agent")
TEMPLATES = Path(__file__).resolve().parent / "templates" / "init"
PACKAGE_FILES = {
    "basic": ("tools.py", "policies.py"),
    "agent": ("tools.py", "policies.py", "users.py", "service.py"),
}


def _render(kind: str, template: str, **values: Any) -> str:
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES / kind),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML and python source, not HTML
    )
    return environment.get_template(f"{template}.j2").render(**values)


def _basic_inputs(name: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{name}-{n:03d}", "prompt": f"What is {a} + {b}?", "answer": a + b}
        for n, (a, b) in enumerate([(2, 3), (10, 32), (-4, 9), (100, 250)])
    ]


ORDERS = [("A101", "pending"), ("A102", "delivered"), ("A103", "pending"), ("A104", "pending")]


def _agent_inputs(name: str) -> list[dict[str, Any]]:
    rows = []
    for order_id, status in ORDERS:
        changes = (
            {"orders": {"updated": {order_id: {"status": "cancelled"}}}}
            if status == "pending"
            else {}  # a delivered order cannot be cancelled: nothing may change
        )
        rows.append(
            {
                "id": f"cancel-{order_id}",
                "prompt": "Hi, I would like to cancel an order.",
                "order_id": order_id,
                "changes": changes,
            }
        )
    return rows


def _agent_snapshot(directory: Path, name: str) -> None:
    directory.mkdir(parents=True)
    database = sqlite3.connect(directory / f"{name}.db")
    try:
        database.execute("CREATE TABLE orders (order_id TEXT PRIMARY KEY, status TEXT)")
        database.executemany("INSERT INTO orders VALUES (?, ?)", ORDERS)
        database.commit()
    finally:
        database.close()


def scaffold(name: str, root: Path = Path("."), kind: str = "basic") -> list[Path]:
    """Write envs/NAME.yaml, envs/NAME_env/ and fixtures/NAME/ (inputs; for an agent env also
    the database snapshot); never overwrite."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UserError(f"env name {name!r}: use lower-case letters, digits and underscores")
    if kind not in KINDS:
        raise UserError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    package = f"{name}_env"
    spec_path = root / "envs" / f"{name}.yaml"
    package_dir = root / "envs" / package
    fixtures = root / "fixtures" / name
    inputs_path = fixtures / "inputs.jsonl"
    for path in (spec_path, package_dir, fixtures):
        if path.exists():
            raise UserError(f"{path} already exists; not overwriting it")
    package_dir.mkdir(parents=True)
    fixtures.mkdir(parents=True)
    records = _agent_inputs(name) if kind == "agent" else _basic_inputs(name)
    inputs_path.write_text("".join(json.dumps(record) + "\n" for record in records))
    created = [spec_path, package_dir, inputs_path]
    if kind == "agent":
        _agent_snapshot(fixtures / "snapshot", name)
        created.append(fixtures / "snapshot")
    (package_dir / "__init__.py").write_text(f'"""Helpers of the {name} env."""\n')
    for module in PACKAGE_FILES[kind]:
        (package_dir / module).write_text(_render(kind, module, name=name))
    inputs_sha = sha256_file(inputs_path)
    spec_path.write_text(
        _render(kind, "spec.yaml", name=name, package=package, inputs_sha=inputs_sha)
    )
    if kind == "agent":  # the inputs' and the snapshot's hashes; record pins its cassette
        from rlenv.pin import pin

        pin(spec_path, missing_only=True)
    return created
