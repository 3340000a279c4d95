"""Issue 28 item 7: the bundled retail agent env (a simulated customer, tools over an SQLite
orders database, graded row by row): run twice with equal digests; the good policy serves every
customer, the bad one changes another order too (caught by the state verifier), null does
nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, cli, read_jsonl

RETAIL = ROOT / "envs" / "retail.yaml"


def _run(out: Path, policy: str) -> dict:
    done = cli(
        "run",
        str(RETAIL),
        "--model",
        f"python:retail_env.policies:{policy}",
        "--out",
        str(out),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_retail_env_twice_equal_and_graded_by_its_rows(tmp_path: Path) -> None:
    good = _run(tmp_path / "good", "good")
    again = _run(tmp_path / "again", "good")
    assert good["digest"] == again["digest"]
    assert good["pass_rate"]["value"] == 1.0 and good["counts"] == {"ok": 20}
    record = read_jsonl(tmp_path / "good" / "results.jsonl")[0]
    turns = record["extra"]["user_turns"]
    assert turns[0]["content"].startswith("It is order O") and turns[-1]["ended"] is True
    bad = _run(tmp_path / "bad", "bad")
    assert bad["pass_rate"]["value"] <= 0.2
    failed = next(r for r in read_jsonl(tmp_path / "bad" / "results.jsonl") if not r["passed"])
    assert "not expected" in json.dumps(failed["verifiers"]) or failed["verifiers"][0]["detail"]
    null = _run(tmp_path / "null", "null")
    assert null["pass_rate"]["value"] == 0.0


def test_retail_env_has_a_disjoint_train_split() -> None:
    held_out = {row["order_id"] for row in read_jsonl(ROOT / "fixtures/retail/inputs.jsonl")}
    train = {row["order_id"] for row in read_jsonl(ROOT / "fixtures/retail/train_inputs.jsonl")}
    assert held_out and train and not held_out & train
