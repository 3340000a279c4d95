"""Issue 28 item 2: the state a policy leaves behind, graded row by row. A python policy acts on
an SQLite orders database (and a JSON file) in its snapshot copy; `sqlite_state` /
`json_state` compare the rows against the changes each input expects, and nothing else may
change. The catalog: the right change passes; an extra change, a missing change, a wrong
column, a changed schema each fail with their reason, and the diff is in the record, the HTML
report and the browser."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlenv.canonical import manifest_hash
from tests.conftest import EnvBuilder, cli, read_jsonl

POLICY = """
import json, sqlite3

ACTIONS = {
    "right": ["UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'"],
    "extra": [
        "UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'",
        "UPDATE orders SET status = 'cancelled' WHERE order_id = 'W3'",
    ],
    "missing": [],
    "column": ["UPDATE orders SET total = 0 WHERE order_id = 'W1'"],
    "schema": [
        "UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'",
        "ALTER TABLE orders ADD COLUMN note TEXT",
    ],
    "swap": [
        "INSERT INTO orders VALUES ('W9', 'pending', 90)",
        "DELETE FROM orders WHERE order_id = 'W2'",
    ],
}

def policy(messages, tools, ctx):
    action = messages[-1]["content"]
    db = sqlite3.connect("orders.db")
    for statement in ACTIONS[action]:
        db.execute(statement)
    db.commit()
    db.close()
    state = json.load(open("profile.json"))
    if action in ("right", "extra"):
        state["user"]["tier"] = "gold"
    if action == "extra":
        state["user"]["email"] = "x@example.com"
    json.dump(state, open("profile.json", "w"))
    return "done"
"""

CANCEL_W1 = {"orders": {"updated": {"W1": {"status": "cancelled"}}}}
GOLD_TIER = {"set": {"/user/tier": "gold"}}
INPUTS = [
    {"id": "right", "prompt": "right", "changes": CANCEL_W1, "json": GOLD_TIER},
    {"id": "extra", "prompt": "extra", "changes": CANCEL_W1, "json": GOLD_TIER},
    {"id": "missing", "prompt": "missing", "changes": CANCEL_W1, "json": {}},
    {"id": "column", "prompt": "column", "changes": CANCEL_W1, "json": {}},
    {"id": "schema", "prompt": "schema", "changes": CANCEL_W1, "json": {}},
    {
        "id": "swap",
        "prompt": "swap",
        "changes": {"orders": {"inserted": {"W9": {"status": "pending"}}, "deleted": ["W2"]}},
        "json": {},
    },
]


def _world(root: Path) -> None:
    world = root / "world"
    world.mkdir(parents=True)
    db = sqlite3.connect(world / "orders.db")
    db.execute("CREATE TABLE orders (order_id TEXT PRIMARY KEY, status TEXT, total INTEGER)")
    db.executemany(
        "INSERT INTO orders VALUES (?, ?, ?)",
        [("W1", "pending", 10), ("W2", "pending", 20), ("W3", "shipped", 30)],
    )
    db.commit()
    db.close()
    (world / "profile.json").write_text(json.dumps({"user": {"tier": "silver", "email": "a@b"}}))


def state_spec(env_builder: EnvBuilder) -> Path:
    spec = env_builder.write(
        POLICY,
        inputs=INPUTS,
        rollouts=1,
        verifiers=[
            {
                "name": "db",
                "type": "sqlite_state",
                "path": "orders.db",
                "expected_field": "changes",
            },
            {
                "name": "profile",
                "type": "json_state",
                "path": "profile.json",
                "expected_field": "json",
            },
        ],
    )
    _world(env_builder.root)
    document = yaml.safe_load(spec.read_text())
    document["snapshot"] = {"path": "world", "sha256": manifest_hash(env_builder.root / "world")}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


@pytest.fixture
def graded(env_builder: EnvBuilder, tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    spec = state_spec(env_builder)
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    return out, {key: {v["name"]: v for v in r["verifiers"]} for key, r in records.items()}


def test_the_catalog_of_state_changes(graded: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    _, verdicts = graded
    right = verdicts["right"]["db"]
    assert right["passed"] is True and right["detail"] is None
    assert right["state"]["tables"]["orders"]["updated"] == {
        "W1": {"status": ["pending", "cancelled"]}
    }
    assert verdicts["right"]["profile"]["passed"] is True

    extra = verdicts["extra"]["db"]
    assert extra["passed"] is False
    assert extra["detail"] == (
        'unexpected change: orders W3 updated (status "shipped" -> "cancelled")'
    )
    assert 0 < extra["score"] < 1
    assert verdicts["extra"]["profile"]["detail"] == (
        'unexpected change: /user/email "a@b" -> "x@example.com"'
    )

    missing = verdicts["missing"]["db"]
    assert missing["passed"] is False and missing["score"] == 0.0
    assert (
        missing["detail"] == 'orders W1.status: expected "cancelled", found "pending" (unchanged)'
    )

    column = verdicts["column"]["db"]
    assert column["passed"] is False
    assert column["detail"] == (
        'orders W1.status: expected "cancelled", found "pending" (unchanged);'
        " unexpected change: orders W1.total 10 -> 0"
    )

    schema = verdicts["schema"]["db"]
    assert schema["passed"] is False
    assert schema["detail"].startswith("schema: table orders changed")

    swap = verdicts["swap"]["db"]
    assert swap["passed"] is True, swap["detail"]
    assert swap["state"]["tables"]["orders"]["deleted"] == {
        "W2": {"order_id": "W2", "status": "pending", "total": 20}
    }


def test_the_diff_is_in_the_report_and_the_browser(
    graded: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    import html as html_module
    import re

    out, _ = graded
    done = cli("report", str(out))
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text()
    blob = re.search(r'id="samples-data"[^>]*>(.*?)</script>', page, re.S)
    assert blob is not None
    data = json.loads(html_module.unescape(blob.group(1)))
    rows = {row["i"]: row for row in data["rows"]}
    db = next(v for v in rows["extra"]["v"] if v[0] == "db")
    assert db[4] == [
        ["orders W1", "updated", 'status: "pending" → "cancelled"'],
        ["orders W3", "updated", 'status: "shipped" → "cancelled"'],
    ]
    profile = next(v for v in rows["extra"]["v"] if v[0] == "profile")
    assert ["/user/email", "changed", '"a@b" → "x@example.com"'] in profile[4]
    assert "stateDiff(state)" in page  # the browser draws it as a table


def test_the_same_run_twice_gives_the_same_digest(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = state_spec(env_builder)
    digests = []
    for name in ("one", "two"):
        done = cli("run", str(spec), "--out", str(tmp_path / name), "--json")
        assert done.returncode == 0, done.stderr
        digests.append(json.loads(done.stdout)["digest"])
    assert digests[0] == digests[1]


def test_bad_expectations_are_named(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = state_spec(env_builder)
    document = yaml.safe_load(spec.read_text())
    document["verifiers"][0].pop("path")
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    done = cli("validate", str(spec))
    assert done.returncode == 2
    assert "verifier of type 'sqlite_state' needs 'path' or 'path_field'" in done.stderr
