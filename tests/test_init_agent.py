"""Issue 28 item 6: `rlenv init --kind agent` scaffolds a user/tools/state env (a tiny SQLite
snapshot, a tool service, a sqlite_state verifier, a python user) whose first ten minutes work
from a fresh directory: record (starts the service, writes and pins the cassette), validate,
run (replayed, the service gone), the same digest twice; a policy that does nothing fails."""

from __future__ import annotations

import json
from pathlib import Path

from rlenv.canonical import sha256_file
from tests.conftest import cli, read_jsonl, require_tool


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


def test_validate_before_record_then_record_a_variant(tmp_path: Path) -> None:
    """Issue 28 leftovers: `validate` on a fresh scaffold says in one line that the fixtures are
    not recorded yet and how to record them (exit 2); `record --set` keeps the hash that the
    base spec pins right (the variant shares the base's cassette), so the base validates."""
    require_tool("faketime")
    assert cli("init", "shop", "--kind", "agent", cwd=tmp_path).returncode == 0
    spec = tmp_path / "envs" / "shop.yaml"
    early = cli("validate", str(spec), cwd=tmp_path)
    assert early.returncode == 2
    assert len(early.stderr.strip().splitlines()) == 1, early.stderr
    assert "not recorded yet" in early.stderr, early.stderr
    assert f"rlenv record {spec}" in early.stderr, early.stderr
    assert "cassette not found" not in early.stderr
    # one input recorded, then every input through a --set variant of the base
    first = cli("record", str(spec), "--limit", "1", "--rollouts", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    cassette = tmp_path / "fixtures" / "shop" / "cassettes" / "cancel_order.yaml"
    pinned = sha256_file(cassette)
    assert pinned in spec.read_text()
    grown = cli("record", str(spec), "--set", "rollouts=1", cwd=tmp_path)
    assert grown.returncode == 0, grown.stderr
    assert sha256_file(cassette) != pinned  # the other inputs' requests were added
    assert sha256_file(cassette) in spec.read_text(), "the base's pinned hash is stale"
    assert f"updated pinned hashes in {spec}" in grown.stdout, grown.stdout
    for extra in ([], ["--set", "rollouts=1"]):
        validated = cli("validate", str(spec), *extra, cwd=tmp_path)
        assert validated.returncode == 0, validated.stderr
