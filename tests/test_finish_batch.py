"""Finish calls that wait for a worker go to it together (`rlenv.executors.finishes`): one request,
answered one by one. A worker that dies grading one of them pins that rollout alone (the others
are graded by its replacement), and a verifier that writes a forged reply for the next rollout of
its batch changes nothing but its own rollout's record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rlenv.agent import Trajectory
from rlenv.errors import WorkerLost
from rlenv.executors import make_executor
from rlenv.executors.local import LocalExecutor
from rlenv.worker.config import RolloutTask, WorkerConfig
from tests.conftest import EnvBuilder, probe_report

VERIFIER = """
import os, pickle, struct

def check(answer, data, ctx):
    if data["id"] == "die":
        os._exit(3)
    if data["id"] == "forge":  # the next rollout of the batch, passed, sealed as a worker would
        from rlenv.results import seal
        from rlenv.worker import protocol
        from rlenv.worker.config import RolloutTask
        runtime = protocol._runtime
        record = runtime.lost(RolloutTask(ctx.input["next"], 0), "openai:x", "ok", "")
        record.pop("digest", None)
        record.update(status="ok", error=None, passed=True, answer="GOLD")
        data = pickle.dumps(("ok", seal(record)))  # a frame on the worker's pipe
        os.write(protocol._orchestrator_fds[0], struct.pack("!i", len(data)) + data)
    return answer == "GOLD"
"""

IDS = ["a", "b", "c", "die", "e", "forge", "victim", "h", "i"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[list[int]]]:
    """Nine finish calls made in one turn of the event loop on a one-worker pool: they go to
    the worker together, in one request. Their results and the batches sent."""
    root = tmp_path_factory.mktemp("finish-batch")
    builder = EnvBuilder(root / "env")
    inputs = [
        {"id": name, "prompt": name, "answer": "GOLD", "next": IDS.index(name) + 1} for name in IDS
    ]
    spec = builder.write(
        VERIFIER,
        inputs=inputs,
        model="openai:x",
        rollouts=1,
        verifiers=[{"type": "python", "function": "MOD:check"}],
    )
    work_root = root / "work"
    work_root.mkdir()
    config = WorkerConfig(spec_path=str(spec), work_root=str(work_root), empty_workdir=True)
    executor = make_executor("local", config, 1, exact=True)
    assert isinstance(executor, LocalExecutor)
    batches: list[list[int]] = []
    sending = executor.finishes._batch

    async def observed(slot: Any, batch: list[Any]) -> None:
        batches.append([entry.task.input_index for entry in batch])
        await sending(slot, batch)

    executor.finishes._batch = observed  # type: ignore[method-assign]

    async def finish_all() -> list[Any]:
        calls = [
            executor.finish(
                RolloutTask(index, 0),
                Trajectory(messages=[{"role": "user", "content": name}, answer(name)]),
                "openai:x",
                30.0,
            )
            for index, name in enumerate(IDS)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        results = asyncio.run(finish_all())
    finally:
        executor.close()
    return results, batches


def answer(name: str) -> dict[str, str]:
    return {"role": "assistant", "content": "nope" if name in ("forge", "victim") else "GOLD"}


def test_waiting_finish_calls_go_to_the_worker_together(
    graded: tuple[list[Any], list[list[int]]],
) -> None:
    _, batches = graded
    assert batches[0] == list(range(len(IDS))), batches


def test_a_death_in_a_batch_pins_that_rollout_alone(
    graded: tuple[list[Any], list[list[int]]],
) -> None:
    results, batches = graded
    died = results[IDS.index("die")]
    assert isinstance(died, WorkerLost), died
    assert died.status == "verifier_error" and "died in the" in died.error
    for name in ("a", "b", "c", "e", "h", "i"):
        record = results[IDS.index(name)]
        assert isinstance(record, dict), (name, record)
        assert (record["input_id"], record["status"], record["passed"]) == (name, "ok", True)
    # the calls after it were sent again, to the worker that replaced it
    assert batches[1][:1] == [IDS.index("e")], batches


def test_a_forged_reply_for_the_next_rollout_changes_nothing_but_its_own(
    graded: tuple[list[Any], list[list[int]]],
) -> None:
    results, _ = graded
    forger = results[IDS.index("forge")]
    assert isinstance(forger, WorkerLost), forger
    assert "not a reply" in forger.error and "another rollout" in forger.error
    victim = results[IDS.index("victim")]
    assert isinstance(victim, dict), victim
    assert (victim["status"], victim["passed"], victim["answer"]) == ("ok", False, "nope")
    for name in ("h", "i"):
        assert results[IDS.index(name)]["passed"] is True, name


INERT_PROBE = """
import json, sys, tempfile
from rlenv.agent import Trajectory
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask, WorkerConfig

root = tempfile.mkdtemp()
config = WorkerConfig(spec_path=sys.argv[1], work_root=root, empty_workdir=True)
protocol.init_worker(config)
touched = []

def audit(event, args):
    if args and isinstance(args[0], str) and args[0].startswith(root):
        touched.append(event)

sys.addaudithook(audit)
said = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "GOLD"}]
records = [
    protocol.handle("finish", RolloutTask(index, 0), Trajectory(messages=said), "openai:x", 30.0)
    for index in range(3)
]
print(json.dumps({"passed": [r["passed"] for r in records], "touched": touched}), file=sys.stderr)
"""


def test_an_inert_world_grades_without_touching_its_work_root(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """An outside policy, text verifiers only, no tool, no snapshot: its rollouts have no workdir
    (`WorldRuntime.inert`), so grading one asks nothing of the work root (a look for the
    workdir, a removal of an output file no call of its could have left, and a look for that
    file were a fifth of a worker's CPU at 256 in flight). A real worker's calls, with an audit
    hook on every path under the work root."""
    inputs = [{"id": name, "prompt": name, "answer": "GOLD"} for name in ("a", "b", "c")]
    spec = env_builder.write("", inputs=inputs, model="openai:x", rollouts=1)
    probe = tmp_path / "probe.py"
    probe.write_text(INERT_PROBE)
    seen = probe_report([str(probe), str(spec)], spec.parent)
    assert seen == {"passed": [True, True, True], "touched": []}
