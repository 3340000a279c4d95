"""Workers started before the env is loaded (`rlenv.executors.early`): taken over by the run
when they were started as its own would be, killed otherwise, and never left behind."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import psutil
import pytest
import yaml

from rlenv import runner
from rlenv.errors import UserError
from rlenv.executors.early import early_pool_size, spec_instant
from rlenv.executors.local import LocalExecutor
from rlenv.runner import RunSettings
from rlenv.spec import load_spec
from rlenv.worker.config import WorkerConfig
from tests.conftest import EnvBuilder

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""


def _workers() -> set[int]:
    """The pids of this process's frozen-world workers (their interpreters, under unshare)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.spawn" in " ".join(child.cmdline()):
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


def _config(spec: Path, work: Path) -> WorkerConfig:
    return WorkerConfig(spec_path=str(spec), work_root=str(work))


def test_the_instant_read_ahead_is_the_loaded_specs(tmp_path: Path) -> None:
    spec = EnvBuilder(tmp_path / "a").write(POLICY, time="2024-03-01T14:00:00+02:00")
    assert (
        spec_instant(spec) == load_spec(spec).spec.time.isoformat() == "2024-03-01T14:00:00+02:00"
    )
    variant = spec.parent / "variant.yaml"
    variant.write_text(yaml.safe_dump({"extends": "env.yaml", "seed": 8}))
    assert spec_instant(variant) is None  # its base gives the time: not read ahead
    naive = EnvBuilder(tmp_path / "b").write(POLICY, time="2024-03-01T12:00:00")
    assert spec_instant(naive) is None
    assert spec_instant(tmp_path / "missing.yaml") is None


def test_workers_started_alike_are_taken_over(tmp_path: Path) -> None:
    spec = EnvBuilder(tmp_path / "env").write(POLICY)
    early = LocalExecutor.early(spec_instant(spec) or "", str(tmp_path), 2)
    started = {slot.process.pid for slot in early.free}
    executor = LocalExecutor(_config(spec, tmp_path / "work"), 2, early)
    try:
        assert {slot.process.pid for slot in executor.free} == started
        assert early.all == []
    finally:
        executor.close()


def test_workers_started_otherwise_are_killed_and_replaced(tmp_path: Path) -> None:
    """Another instant (the spec changed between the read ahead and the load): the early
    workers' clock would be wrong, so none is taken, and none is left running."""
    spec = EnvBuilder(tmp_path / "env").write(POLICY)
    early = LocalExecutor.early("1999-01-01T00:00:00+00:00", str(tmp_path), 2)
    started = {slot.process.pid for slot in early.free}
    executor = LocalExecutor(_config(spec, tmp_path / "work"), 2, early)
    try:
        assert not started & {slot.process.pid for slot in executor.free}
        assert not started & {p.pid for p in psutil.process_iter() if p.is_running()}
    finally:
        executor.close()


def test_a_run_that_fails_before_its_workers_are_taken_leaves_none(tmp_path: Path) -> None:
    builder = EnvBuilder(tmp_path / "env")
    spec = builder.write(POLICY)
    (spec.parent / "inputs.jsonl").write_text('{"id": "a", "prompt": "changed", "answer": "a"}\n')
    before = _workers()
    with pytest.raises(UserError, match="sha256"):  # the inputs' pin: found by the load
        runner.run(spec, RunSettings(out=tmp_path / "run", concurrency=2))
    assert _workers() - before == set()


def test_runs_with_and_without_early_workers_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = [{"id": f"i{n}", "prompt": f"say {n}", "answer": str(n)} for n in range(6)]
    spec = EnvBuilder(tmp_path / "env").write(POLICY, inputs=inputs)
    taken: list[int] = []
    original = LocalExecutor._take

    def counting(self: LocalExecutor, early: LocalExecutor) -> list[object]:
        got = original(self, early)
        taken.append(len(got))
        return got  # type: ignore[return-value]

    monkeypatch.setattr(LocalExecutor, "_take", counting)
    before = _workers()  # another test's, in this process (a module's server)
    with_early = runner.run(spec, RunSettings(out=tmp_path / "early", concurrency=2))
    assert taken == [2]
    monkeypatch.setattr(runner, "early_pool_size", lambda settings, default: 0)
    without = runner.run(spec, RunSettings(out=tmp_path / "late", concurrency=2))
    assert taken == [2]
    assert with_early.summary["counts"] == {"ok": 12}
    assert with_early.digest == without.digest
    assert _workers() - before == set()


def test_the_pool_started_early(tmp_path: Path) -> None:
    settings = RunSettings(concurrency=4)
    assert early_pool_size(settings, 2) == 2
    assert early_pool_size(dataclasses.replace(settings, limit=1), 2) == 1
    assert early_pool_size(dataclasses.replace(settings, resume=True), 2) == 0
    assert early_pool_size(dataclasses.replace(settings, executor="ray"), 2) == 0
    record = dataclasses.replace(settings, record_dir=Path(tempfile.gettempdir()))
    assert early_pool_size(record, 2) == 0
    assert early_pool_size(dataclasses.replace(settings, workers=3), 2) == 3


MULTIPROCESSING_POLICY = """
import multiprocessing

def policy(messages, tools, ctx):
    lock = multiprocessing.get_context("spawn").Lock()  # a named semaphore, registered
    with lock:
        return messages[-1]["content"].split()[-1]
"""


def test_a_run_starts_no_resource_tracker_and_env_code_may_use_semaphores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers are spawned with /dev/null for multiprocessing's resource tracker (a Python
    process, ~7 MB of a run's peak, was started for every run); env code that makes a named
    semaphore in the world still runs, its registration written to /dev/null."""
    from multiprocessing import resource_tracker

    # a tracker of this test's own, not started: any spawn that wants one starts it
    tracker = resource_tracker.ResourceTracker()
    monkeypatch.setattr(resource_tracker, "_resource_tracker", tracker)
    monkeypatch.setattr(resource_tracker, "getfd", tracker.getfd)
    monkeypatch.setattr(resource_tracker, "ensure_running", tracker.ensure_running)
    spec = EnvBuilder(tmp_path / "env").write(MULTIPROCESSING_POLICY)
    result = runner.run(spec, RunSettings(out=tmp_path / "run", concurrency=2))
    assert result.summary["counts"] == {"ok": 4}
    assert tracker._pid is None, "a resource tracker was started"
