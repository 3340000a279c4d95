"""What in-world code on Ray does to its own rollout's reply changes nothing: the policy runs
in a child of the worker an actor hosts (`rlenv.executors.ray`), so patching how the worker
seals records patches only the child. Before actors hosted a local worker, the policy ran in
the actor itself: a forged record of another rollout was written as that rollout's line and a
raised RecursionError ended the whole run; the driver then checked what an actor sent
(`rlenv.executors.replies`, still done) and made each the attacked rollout's `policy_error`.
Now the attacked rollout's record is its honest one ("x", not the gold), the others pass, and
the run ends normally.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from rlenv.runner import RunSettings, run  # noqa: E402
from tests.conftest import EnvBuilder, local_ray, read_jsonl  # noqa: E402

# the policy of input "bad" swaps the worker's record sealer for one call: what the actor
# returns for this very rollout is then the forged value
FORGING_POLICY = """
import rlenv.worker.protocol as protocol

def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value

def policy(messages, tools, ctx):
    last = messages[-1]["content"]
    if not last.startswith("attack "):
        return last.split()[-1]
    kind = last.split()[1]
    original = protocol._with_output

    def forged(record, output):
        protocol._with_output = original
        record = original(record, output)
        if kind == "other":
            return {**record, "input_index": 0}
        if kind == "deep":
            return {**record, "answer": _nested(400)}
        raise RecursionError("forged")

    protocol._with_output = forged
    return "x"
"""

ATTACKS = ("deep", "other", "raise")


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    with local_ray(num_cpus=1, store_mb=128):
        yield


@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_a_forged_reply_changes_nothing_on_ray(
    env_builder: EnvBuilder, tmp_path: Path, kind: str
) -> None:
    inputs = [
        {"id": "ok0", "prompt": "say ok0", "answer": "ok0"},
        {"id": "bad", "prompt": f"attack {kind}", "answer": "never"},
        {"id": "ok1", "prompt": "say ok1", "answer": "ok1"},
    ]
    spec = env_builder.write(FORGING_POLICY, inputs=inputs, rollouts=1)
    result = run(spec, RunSettings(out=tmp_path / "ray", executor="ray", concurrency=1))
    records = {r["input_id"]: r for r in read_jsonl(result.run_dir / "results.jsonl")}
    assert sorted(records) == ["bad", "ok0", "ok1"]
    assert records["ok0"]["passed"] and records["ok1"]["passed"]
    bad = records["bad"]
    assert (bad["status"], bad["answer"], bad["passed"]) == ("ok", "x", False), bad
    assert bad["input_index"] == 1 and bad.get("error") is None, bad
