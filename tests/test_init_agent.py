"""Issue 28 item 6: `rlenv init --kind agent` scaffolds a user/tools/state env (a tiny SQLite
snapshot, a tool service, a sqlite_state verifier, a python user) whose first ten minutes work
from a fresh directory: record (starts the service, writes and pins the cassette), validate,
run (replayed, the service gone), the same digest twice; a policy that does nothing fails."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import cli, read_jsonl


def test_agent_scaffold_first_ten_minutes(tmp_path: Path) -> None:
    created = cli("init", "shop", "--kind", "agent", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert "next: rlenv record envs/shop.yaml" in created.stdout
    spec = tmp_path / "envs" / "shop.yaml"
    recorded = cli("record", str(spec), cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    assert "cancel_order: 3 interactions (3 new)" in recorded.stdout, recorded.stdout
    assert "sha256" in (spec.read_text().split("cancel_order.yaml")[-1])
    validated = cli("validate", str(spec), cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    digests = []
    for out in ("one", "two"):
        done = cli("run", str(spec), "--out", str(tmp_path / out), "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["pass_rate"]["value"] == 1.0 and summary["counts"] == {"ok": 8}
        assert summary["fixtures"]["hit"] == 6 and "miss" not in summary["fixtures"]
        digests.append(summary["digest"])
    assert digests[0] == digests[1]
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    record = next(r for r in records if r["input_id"] == "cancel-A101")
    assert record["extra"]["user_turns"][0]["content"] == "It is A101."
    null = cli(
        "run",
        str(spec),
        "--model",
        "python:shop_env.policies:null",
        "--out",
        str(tmp_path / "null"),
        "--json",
        cwd=tmp_path,
    )
    assert null.returncode == 0, null.stderr
    assert json.loads(null.stdout)["pass_rate"]["value"] == 0.25  # only the delivered order
    again = cli("init", "shop", "--kind", "agent", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_unknown_kind_is_one_line(tmp_path: Path) -> None:
    done = cli("init", "shop", "--kind", "robot", cwd=tmp_path)
    assert done.returncode == 2 and "--kind must be one of basic, agent" in done.stderr
    assert not (tmp_path / "envs").exists()
