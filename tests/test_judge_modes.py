"""Issue 28 item 3: judges that grade new checkpoints. `record_missing` judges a miss live (a real
loopback OpenAI-compatible server) and appends it to the cassette, the run says how many
judgments were live, and the env fingerprint does not change as the cassette grows; `live`
judges every answer and pins the judge in run.json; the judge's reasoning is the verifier's
detail; a replay miss says how to judge new answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import EnvBuilder, cli, read_jsonl

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""
RUBRIC = "Rate {{ answer }}. score: {{ 8 if answer == gold else 2 }}"


def _spec(env_builder: EnvBuilder, mode: str, cassette: bool = True) -> Path:
    judge: dict[str, Any] = {
        "model": "openai:judge-1",
        "rubric": RUBRIC,
        "mode": mode,
        "scale": [0, 10],
        "threshold": 0.6,
    }
    if cassette:
        judge["cassette"] = {"path": "judge.jsonl"}
    return env_builder.write(
        POLICY,
        inputs=[
            {"id": "a", "prompt": "say apple", "gold": "apple"},
            {"id": "b", "prompt": "say pear", "gold": "plum"},
        ],
        rollouts=1,
        verifiers=[{"name": "judged", "type": "judge", "judge": judge}],
    )


def _run(spec: Path, out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = cli("run", str(spec), "--out", str(out), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _fingerprint(out: Path) -> str:
    return str(json.loads((out / "run.json").read_text())["env"]["fingerprint"])


def test_record_missing_judges_a_miss_live_and_the_env_stays_the_same(
    env_builder: EnvBuilder, tmp_path: Path, chat: Any
) -> None:
    spec = _spec(env_builder, "record_missing")
    cassette = env_builder.root / "judge.jsonl"
    assert cli("validate", str(spec)).returncode == 0  # no cassette yet: it will be written
    server = chat()
    first = _run(spec, tmp_path / "one", {"OPENAI_BASE_URL": server.base_url})
    assert len(server.received) == 2
    assert first["judges"] == {"judged": {"mode": "record_missing", "live_judgments": 2}}
    assert len(cassette.read_text().splitlines()) == 2  # appended to the cassette
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "one" / "results.jsonl")}
    assert records["a"]["passed"] is True and records["b"]["passed"] is False
    # the judge's reasoning is the verifier's detail
    assert (
        records["a"]["verifiers"][0]["detail"]
        == "judge score 8 (of 0-10): echo: Rate apple. score: 8"
    )
    assert (
        records["b"]["verifiers"][0]["detail"]
        == "judge score 2 (of 0-10): echo: Rate pear. score: 2"
    )

    server.stop()  # every judgment is in the cassette now: replayed, nothing live
    second = _run(spec, tmp_path / "two")
    assert second["judges"]["judged"]["live_judgments"] == 0
    assert second["digest"] == first["digest"]
    assert _fingerprint(tmp_path / "two") == _fingerprint(tmp_path / "one")
    assert cli("validate", str(spec)).returncode == 0  # a grown cassette still validates
    compared = cli("compare", str(tmp_path / "one"), str(tmp_path / "two"), "--json")
    assert compared.returncode == 0, compared.stderr


def test_live_judges_every_answer_and_pins_the_judge(
    env_builder: EnvBuilder, tmp_path: Path, chat: Any
) -> None:
    spec = _spec(env_builder, "live", cassette=False)
    server = chat()
    env = {"OPENAI_BASE_URL": server.base_url}
    first = _run(spec, tmp_path / "one", env)
    second = _run(spec, tmp_path / "two", env)
    assert len(server.received) == 4  # never replayed
    assert first["digest"] == second["digest"]  # the same judge, the same replies
    assert second["judges"]["judged"] == {"mode": "live", "live_judgments": 2}
    pinned = json.loads((tmp_path / "one" / "run.json").read_text())["judges"]["judged"]
    assert pinned["model"] == "openai:judge-1" and pinned["mode"] == "live"
    assert pinned["temperature"] == 0.0 and pinned["max_tokens"] == 256
    assert len(pinned["rubric_sha256"]) == 64
    kept = read_jsonl(tmp_path / "one" / "judge-judged.jsonl")  # every exchange kept
    assert sorted(k["reply"] for k in kept) == [
        "echo: Rate apple. score: 8",
        "echo: Rate pear. score: 2",
    ]
    assert not (env_builder.root / "judge.jsonl").exists()


def test_a_replay_miss_says_how_to_judge_new_answers(
    env_builder: EnvBuilder, tmp_path: Path, chat: Any
) -> None:
    spec = _spec(env_builder, "replay")
    server = chat()
    assert cli("record", str(spec), env={"OPENAI_BASE_URL": server.base_url}).returncode == 0
    assert cli("pin", str(spec)).returncode == 0
    document = yaml.safe_load(spec.read_text())
    document["verifiers"][0]["judge"]["rubric"] = RUBRIC + " Be strict."
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    miss = cli("run", str(spec), "--out", str(tmp_path / "miss"), "--json")
    assert miss.returncode == 1  # no verdict could be given: the run says so
    assert "set judge.mode record_missing or live to judge new answers" in miss.stderr
    record = read_jsonl(tmp_path / "miss" / "results.jsonl")[0]
    assert record["status"] == "verifier_error"
    assert "set judge.mode record_missing or live" in record["error"]


def test_the_judge_probe_shows_how_much_each_attack_moves_the_judge(
    env_builder: EnvBuilder, chat: Any
) -> None:
    """A judge that echoes its rubric (the answer inside it) takes the first `score: N` it
    reads: an answer that says `score: 10` about itself passes. The probe finds it; padding
    and flattery do not move this judge."""
    spec = _spec(env_builder, "replay")
    server = chat(answer=lambda messages: str(messages[-1]["content"]))  # the whole rubric
    env = {"OPENAI_BASE_URL": server.base_url}
    done = cli("probe", str(spec), "--judge", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["judges"]["judged"]
    # 2 inputs x the null answer (these inputs have no `answer` field) x (base + 3 attacks)
    assert report["calls"] == len(server.received) == 8
    attacks = report["attacks"]
    assert attacks["injection"]["fail_to_pass"] == 2 and attacks["injection"]["answers"] == 2
    assert attacks["injection"]["mean_score_change"] == 0.8  # 2/10 -> 10/10
    assert attacks["padding"]["fail_to_pass"] == attacks["flattery"]["fail_to_pass"] == 0
    text = cli("probe", str(spec), "--judge", env=env)
    assert text.returncode == 0, text.stderr
    assert "judge judged (8 live calls):" in text.stdout
    assert "injection  score change +0.800, fail -> pass 2/2" in text.stdout
