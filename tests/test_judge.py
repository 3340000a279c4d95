"""Issue 18 item 7: a model-graded verifier frozen like the tools. `rlenv record` calls the
judge (a real loopback OpenAI-compatible server) and keeps its replies; `rlenv run` replays them
with the judge gone; a request never recorded is a verifier_error; re-recording is stable."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import EnvBuilder, cli, read_jsonl

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""

# the test server echoes the rendered rubric, so the rubric decides the judge's score
RUBRIC = "Grade the answer {{ answer }} to '{{ prompt }}'. score: {{ 8 if answer == gold else 2 }}"


def _spec(env_builder: EnvBuilder) -> Path:
    inputs = [
        {"id": "a", "prompt": "say apple", "gold": "apple"},
        {"id": "b", "prompt": "say banana", "gold": "cherry"},
    ]
    judge = {
        "model": "openai:judge-1",
        "rubric": RUBRIC,
        "cassette": {"path": "judge.jsonl"},
        "scale": [0, 10],
        "threshold": 0.6,
    }
    return env_builder.write(
        POLICY,
        inputs=inputs,
        rollouts=1,
        verifiers=[{"name": "judged", "type": "judge", "judge": judge}],
    )


def test_judge_recorded_then_replayed(env_builder: EnvBuilder, tmp_path: Path, chat) -> None:
    spec = _spec(env_builder)
    missing = cli("validate", str(spec))
    assert missing.returncode == 2
    assert "not recorded yet (verifiers[0].judge.cassette" in missing.stderr

    server = chat()
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-judge-secret-123"}
    recorded = cli("record", str(spec), "--json", env=env)
    assert recorded.returncode == 0, recorded.stderr
    cassette = env_builder.root / "judge.jsonl"
    lines = cassette.read_text().splitlines()
    assert len(lines) == 2 and "sk-judge-secret" not in cassette.read_text()
    assert len(server.received) == 2
    assert all(body["model"] == "judge-1" for body in server.received)

    assert cli("pin", str(spec)).returncode == 0
    server.stop()  # replay needs no judge
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    assert records["a"]["passed"] is True and records["a"]["verifiers"][0]["score"] == 0.8
    assert records["b"]["passed"] is False
    assert records["b"]["verifiers"][0]["detail"] == (  # the judge's reasoning (issue 28)
        "judge score 2 (of 0-10): echo: Grade the answer banana to 'say banana'. score: 2"
    )
    again = cli("run", str(spec), "--out", str(tmp_path / "again"), "--json")
    assert json.loads(again.stdout)["digest"] == json.loads(done.stdout)["digest"]

    # a changed rubric asks the judge something it never answered: an error, not a verdict
    document = yaml.safe_load(spec.read_text())
    document["verifiers"][0]["judge"]["rubric"] = RUBRIC + " Be strict."
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    miss = cli("run", str(spec), "--out", str(tmp_path / "miss"), "--json")
    records = read_jsonl(tmp_path / "miss" / "results.jsonl")
    assert {r["status"] for r in records} == {"verifier_error"}, miss.stderr
    assert "was never recorded" in records[0]["error"]


def test_rerecording_gives_the_same_cassette(env_builder: EnvBuilder, chat) -> None:
    spec = _spec(env_builder)
    cassette = env_builder.root / "judge.jsonl"
    first_server = chat()
    env = {"OPENAI_BASE_URL": first_server.base_url}
    assert cli("record", str(spec), env=env).returncode == 0
    first = cassette.read_bytes()
    second_server = chat()  # another port: the cassette holds no URL
    env = {"OPENAI_BASE_URL": second_server.base_url}
    assert cli("record", str(spec), "--mode", "all", env=env).returncode == 0
    assert cassette.read_bytes() == first
    assert cli("pin", str(spec)).returncode == 0
    assert cli("validate", str(spec)).returncode == 0
