"""A fixed pool of frozen-world workers (`--workers N`, default one per core) shared by the
rollouts in flight (`--concurrency`): the records and digests do not depend on the pool's size,
and a policy outside the world holds no worker while the model answers."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.conftest import EnvBuilder, cli

IN_WORLD = """
def policy(messages, tools, ctx):
    return messages[-1]["content"][-1]

def tool(args, ctx):
    return "found " + args.get("query", "")
"""

INPUTS = [{"id": name, "prompt": f"say {name}", "answer": name} for name in "abcd"]


def _tools() -> list[dict[str, Any]]:  # a new list each time: EnvBuilder.write edits it
    return [
        {
            "name": "search",
            "function": "MOD:tool",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        }
    ]


def _digests(spec: Path, out: Path, *options: str) -> tuple[str, str, dict[str, int]]:
    result = cli(
        "run", str(spec), "--out", str(out), "--json", *options, cwd=spec.parent, timeout=600
    )
    assert result.returncode == 0, (options, result.stdout[-2000:] + result.stderr[-2000:])
    summary = json.loads(result.stdout)
    return summary["digest"], summary["outcome_digest"], summary["counts"]


def test_in_world_records_do_not_depend_on_the_pool_size(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(IN_WORLD, inputs=INPUTS, rollouts=2, tools=_tools())
    seen = {
        workers: _digests(
            spec, tmp_path / f"w{workers}", "--concurrency", "8", "--workers", str(workers)
        )
        for workers in (1, 2)  # and 8 with the policy outside (the next test)
    }
    assert seen[1][2] == {"ok": 8}
    assert seen[1] == seen[2]


class _Together:
    """An answer rule that waits until `parties` conversations are at their last model call at
    once: with fewer workers than rollouts in flight, only rollouts that hold no worker during
    their model calls can all be there together."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=30)

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            return "alone"
        return "together"


def test_outside_policy_rollouts_share_the_pool_and_records_do_not_depend_on_it(
    chat: Any, env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """8 rollouts in flight, each a model call, a tool call in a worker, a model call: all 8
    meet at their last model call whatever the pool (one worker included), and every pool
    gives the same digests."""
    server = chat(answer=_Together(8))
    inputs = [{**record, "answer": "together"} for record in INPUTS]
    spec = env_builder.write(
        IN_WORLD, inputs=inputs, rollouts=2, tools=_tools(), model="openai:tiny"
    )
    seen = {}
    for workers in (1, 2, 8):
        out = tmp_path / f"w{workers}"
        options = ("--base-url", server.base_url, "--concurrency", "8", "--workers", str(workers))
        seen[workers] = _digests(spec, out, *options)
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert [record["answer"] for record in records] == ["together"] * 8, workers
        assert [len(record["tool_calls"]) for record in records] == [1] * 8, workers
    assert seen[1][2] == {"ok": 8}
    assert seen[1] == seen[2] == seen[8]


def test_workers_out_of_range_is_one_line(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(IN_WORLD)
    result = cli("run", str(spec), "--out", str(tmp_path / "run"), "--workers", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("--workers must be between 1 and 256")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_explicit_pool_is_not_capped_at_the_cores(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    import os

    from rlenv.executors import make_executor
    from rlenv.worker.config import WorkerConfig

    spec = env_builder.write(IN_WORLD)
    wanted = (os.cpu_count() or 1) + 1
    config = WorkerConfig(
        spec_path=str(spec),
        work_root=str(tmp_path),
        model_uri=f"python:{env_builder.module}:policy",
    )
    executor = make_executor("local", config, wanted, exact=True)
    try:
        assert executor.workers == wanted
        assert executor.config.loaded_spec.path == spec.resolve()  # type: ignore[attr-defined,union-attr]
        assert len({slot.process.pid for slot in executor.all}) == wanted  # type: ignore[attr-defined]
    finally:
        executor.close()
