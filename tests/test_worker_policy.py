"""The processes that serve the orchestrator's event loop do not preempt it: a local worker (and
so its env code's children) and the results writer run SCHED_BATCH (`rlenv.executors.spawning`),
while the orchestrator keeps the policy it was started with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from rlenv.executors import make_executor
from rlenv.executors.local import LocalExecutor
from rlenv.results_aside import ResultsAside
from rlenv.summary import SummaryInputs, SummaryPlan
from rlenv.worker.config import WorkerConfig
from tests.conftest import EnvBuilder
from tests.test_results_aside import META, _records

POLICY = """
def policy(messages, **_):
    return {"role": "assistant", "content": "a"}
"""


def test_a_worker_runs_sched_batch_and_the_orchestrator_as_it_was(tmp_path: Path) -> None:
    spec = EnvBuilder(tmp_path / "env").write(POLICY)
    work_root = tmp_path / "work"
    work_root.mkdir()
    own = os.sched_getscheduler(0)
    config = WorkerConfig(spec_path=str(spec), work_root=str(work_root), model_uri=None)
    executor = make_executor("local", config, 2, exact=True)
    assert isinstance(executor, LocalExecutor)
    try:
        assert len(executor.all) == 2  # started and ready: serve() set the policy first
        below = [  # this executor's workers and what is under them (unshare, sh: wrappers)
            process
            for slot in executor.all
            for top in [psutil.Process(slot.process.pid)]
            for process in [top, *top.children(recursive=True)]
        ]
        pythons = [process.pid for process in below if "python" in process.name()]
        assert len(pythons) >= 2, [process.cmdline() for process in below]
        assert {pid: os.sched_getscheduler(pid) for pid in pythons} == dict.fromkeys(
            pythons, os.SCHED_BATCH
        )
    finally:
        executor.close()
    assert os.sched_getscheduler(0) == own != os.SCHED_BATCH


class PolicyPlan(SummaryPlan):
    """The summary, with the scheduling policy of the process that built it (the writer)."""

    def build(self, written: Any) -> dict[str, Any]:
        return {**super().build(written), "policy": os.sched_getscheduler(0)}


def test_the_results_writer_runs_sched_batch(tmp_path: Path) -> None:
    plan = PolicyPlan(SummaryInputs(5), META, tmp_path / "r.jsonl", 0, "openai:tiny")
    aside = ResultsAside(plan)
    for record in _records():
        aside.write(record)
    summary = aside.finish()
    assert summary["policy"] == os.SCHED_BATCH != os.sched_getscheduler(0)
