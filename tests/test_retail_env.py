"""Issue 28 item 7: the bundled retail agent env (a simulated customer, tools over an SQLite
orders database and a store backend replayed from cassettes, graded row by row and by a judge in
record_missing mode): run twice with equal digests; the good policy serves every customer, the
bad one changes another order too (caught by the state verifier), null does nothing; a new
checkpoint's replies are judged live by the judge service the env ships."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import ROOT, cli, read_jsonl
from tests.test_bundled_envs import OUTCOME_DIGESTS

RETAIL = ROOT / "envs" / "retail.yaml"


def _run(out: Path, policy: str, spec: Path = RETAIL) -> dict:
    done = cli(
        "run",
        str(spec),
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
    assert good["outcome_digest"] == OUTCOME_DIGESTS[RETAIL], "outcomes differ on this machine"
    assert good["pass_rate"]["value"] == 1.0 and good["counts"] == {"ok": 30}
    # every judgment and every store request replayed: no service started, nothing live
    assert good["judges"] == {"reply": {"mode": "record_missing", "live_judgments": 0}}
    assert good["fixtures"]["hit"] == 30 and "miss" not in good["fixtures"]
    assert good["reward"]["mean"] == 1.0
    records = read_jsonl(tmp_path / "good" / "results.jsonl")
    turns = records[0]["extra"]["user_turns"]
    assert turns[0]["content"].startswith("It is order O") and turns[-1]["ended"] is True
    refund = next(r for r in records if r["input_id"].startswith("refund-"))
    assert refund["tool_calls"][1]["fixture"] == "hit"  # the store's reply, replayed
    assert "refund_id" in next(
        m["content"] for m in refund["messages"] if m["role"] == "tool" and "rf_" in m["content"]
    )
    judged = {v["name"]: v for v in refund["verifiers"]}["reply"]
    assert judged["detail"].startswith("judge score 5 (of 1-5): The reply names order")
    bad = _run(tmp_path / "bad", "bad")
    assert bad["pass_rate"]["value"] <= 0.4  # only where nothing is at stake (tracking)
    failed = next(r for r in read_jsonl(tmp_path / "bad" / "results.jsonl") if not r["passed"])
    assert "not expected" in json.dumps(failed["verifiers"]) or failed["verifiers"][0]["detail"]
    null = _run(tmp_path / "null", "null")
    assert null["pass_rate"]["value"] == 0.0
    assert 0 < null["reward"]["mean"] < bad["reward"]["mean"] < good["reward"]["mean"]


def _copy(root: Path) -> Path:
    """The env in `root` (its judge cassette grows when a new answer is judged)."""
    shutil.copytree(ROOT / "envs" / "retail_env", root / "envs" / "retail_env")
    shutil.copytree(ROOT / "fixtures" / "retail", root / "fixtures" / "retail")
    shutil.copyfile(RETAIL, root / "envs" / "retail.yaml")
    return root / "envs" / "retail.yaml"


TERSE = """

def terse(messages, tools, ctx):
    \"\"\"A new checkpoint: serves the customer, but its last reply never names the order.\"\"\"
    reply = good(messages, tools, ctx)
    return "All done." if isinstance(reply, str) and reply.startswith(("Done", "Order")) else reply
"""


def test_a_new_checkpoint_is_judged_live_by_the_env_judge_service(tmp_path: Path) -> None:
    """Judge mode record_missing: replies the cassette lacks are judged by the env's own judge
    service, which `rlenv run` starts from `services:` for them, and join the cassette; the
    env's fingerprint does not change."""
    spec = _copy(tmp_path)
    with open(tmp_path / "envs" / "retail_env" / "policies.py", "a") as handle:
        handle.write(TERSE)
    cassette = tmp_path / "fixtures" / "retail" / "cassettes" / "judge.jsonl"
    before = len(cassette.read_text().splitlines())
    first = _run(tmp_path / "one", "terse", spec)
    assert first["judges"] == {"reply": {"mode": "record_missing", "live_judgments": 15}}
    assert len(cassette.read_text().splitlines()) == before + 15
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    served = next(r for r in records if r["input_id"].startswith("cancel-"))
    judged = {v["name"]: v for v in served["verifiers"]}
    assert judged["orders"]["passed"] is True and judged["reply"]["passed"] is False
    assert judged["reply"]["detail"].startswith("judge score 1 (of 1-5): The reply does not")
    second = _run(tmp_path / "two", "terse", spec)  # now replayed: nothing started
    assert second["judges"]["reply"]["live_judgments"] == 0
    assert second["outcome_digest"] == first["outcome_digest"]
    fingerprints = [
        json.loads((tmp_path / run / "run.json").read_text())["env"]["fingerprint"]
        for run in ("one", "two")
    ]
    assert fingerprints[0] == fingerprints[1]


def test_retail_env_has_a_disjoint_train_split() -> None:
    held_out = {row["order_id"] for row in read_jsonl(ROOT / "fixtures/retail/inputs.jsonl")}
    train = {row["order_id"] for row in read_jsonl(ROOT / "fixtures/retail/train_inputs.jsonl")}
    assert held_out and train and not held_out & train


def test_two_grpo_steps_on_the_retail_env(tmp_path: Path) -> None:
    """TRL's GRPO with environment_factory on the retail env: its train split as the dataset,
    its tools as the environment's methods over the rollout's own copy of the database, graded
    by sqlite_state on the rows that copy holds, its replies by the judge (a tiny model built
    here; the env's judge service judges what its cassette lacks)."""
    from trl import GRPOTrainer

    import rlenv.trl as rt
    from tests.tiny_models import grpo_config, tool_calling_model

    spec = _copy(tmp_path / "env")
    model, processing_class = tool_calling_model(tmp_path / "tiny")
    dataset = rt.dataset(spec)
    train_ids = {row["order_id"] for row in read_jsonl(ROOT / "fixtures/retail/train_inputs.jsonl")}
    assert len(dataset) == len(train_ids)
    trainer = GRPOTrainer(
        model=model,
        processing_class=processing_class,
        reward_funcs=rt.reward_funcs(spec),
        train_dataset=dataset,
        environment_factory=rt.environment_factory(spec),
        args=grpo_config(tmp_path / "out", reward_weights=rt.reward_weights(spec)),
    )
    trainer.train()
    logged = {key: entry[key] for entry in trainer.state.log_history for key in entry}
    for component in ("state", "reply"):  # the composite reward's components
        assert logged.get(f"rewards/{component}/mean") is not None, sorted(logged)
    assert sum(rt.world(spec).rollouts.values()) >= 4  # every rollout entered the world
