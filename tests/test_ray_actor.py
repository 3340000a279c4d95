"""The body of a Ray actor (`rlenv.executors.ray.WorldActor`), called in this process without
Ray: it hosts a local executor whose isolated worker runs each rollout in a fork of its own, so
a module global one rollout sets is not there for the next; a worker that dies under a call
comes back as `_Lost` (the local executor's `WorkerLost`, which Ray cannot pickle) with the
local error text, and the next call runs on the worker that replaced it. The same through Ray:
`tests/test_ray_channels.py`, `tests/test_ray_executor.py`.
"""

from __future__ import annotations

from pathlib import Path

from rlenv.executors import bundle
from rlenv.executors.ray import WorldActor, _Lost
from rlenv.worker.config import RolloutTask, WorkerConfig
from tests.conftest import EnvBuilder

REMEMBERING_POLICY = """
import os

SEEN = []  # a module global: what an earlier rollout in the same process left

def policy(messages, tools, ctx):
    word = messages[-1]["content"].split()[-1]
    if word == "dies":
        os._exit(3)
    SEEN.append(word)
    return word if SEEN == [word] else "saw " + ",".join(SEEN)
"""


def test_an_actor_forwards_to_an_isolated_worker(env_builder: EnvBuilder, tmp_path: Path) -> None:
    words = ("a", "b", "dies", "c")
    inputs = [{"id": word, "prompt": f"say {word}", "answer": word} for word in words]
    spec = env_builder.write(REMEMBERING_POLICY, inputs=inputs, rollouts=1)
    packed = bundle.build(str(spec))
    (tmp_path / "work").mkdir()
    config = WorkerConfig(
        spec_path=str(spec),
        work_root=str(tmp_path / "work"),
        model_uri=f"python:{env_builder.module}:policy",
    )
    actor = WorldActor(config, packed.data, packed.spec)
    try:
        assert (actor.error, actor.user_error) == (None, None)
        assert actor.root is not None and actor.root.parent == tmp_path / "work"
        replies = [actor.run_rollout(RolloutTask(index, 0), 10.0) for index in range(4)]
    finally:
        actor.shutdown()
    answers = [r["answer"] if isinstance(r, dict) else r for r in replies]
    assert answers[:2] == ["a", "b"] and answers[3] == "c", answers
    died = "the worker process died in the policy (exit code 3)"
    assert answers[2] == _Lost("policy_error", died)
    assert not any((tmp_path / "work").iterdir()), "the actor removes its root"
