"""Issue 29 item 2: a real TRL GRPOTrainer (2 steps, a tiny model built here) whose rollouts
go through `rlenv serve` on loopback: the env's tool is a method of the environment class
`rlenv.serve.client.environment_factory` builds from the server, each call a step of an
episode, and the reward the one the server graded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, read_jsonl
from tests.serving import served, tool_env

pytest.importorskip("openenv", reason="the serve extra (openenv-core)")
pytest.importorskip("trl", reason="the trl extra")


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread while the tiny model trains: its ops are too small to share, and on
    a busy machine the second thread's spin-waiting was half the training's CPU. Restored."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.usefixtures("one_torch_thread")
def test_grpo_trains_on_the_served_env(tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOTrainer

    from rlenv.serve.client import environment_factory, reward_func
    from tests.tiny_models import grpo_config, tool_calling_model

    spec = tool_env(tmp_path / "env")
    out = tmp_path / "served"
    model, processing_class = tool_calling_model(tmp_path / "tiny")
    with served(spec, out, "--split", "train", "--workers", "1", "--model", "tiny-grpo") as (
        url,
        process,
    ):
        Env = environment_factory(url)
        assert [name for name in vars(Env) if not name.startswith("_")] == ["base_url", "lookup"]
        dataset = Dataset.from_list(
            [
                {"prompt": [{"role": "user", "content": "repeat cherry"}], "rlenv_id": "t1"},
                {"prompt": [{"role": "user", "content": "repeat DATE"}], "rlenv_id": "t2"},
            ]
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=processing_class,
            reward_funcs=[reward_func],
            train_dataset=dataset,
            environment_factory=Env,
            args=grpo_config(tmp_path / "out"),
        )
        trainer.train()
        assert trainer.state.global_step == 2
        logged = {key for entry in trainer.state.log_history for key in entry}
        assert "rewards/reward_func/mean" in logged, sorted(logged)
    records = read_jsonl(out / "results.jsonl")
    # every rollout of the 2 steps (2 prompts x 2 generations each) was a served episode
    assert len(records) >= 4
    assert {r["input_id"] for r in records} == {"t1", "t2"}
    assert all(r["model"] == "tiny-grpo" for r in records)
    checked = cli("check", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr
