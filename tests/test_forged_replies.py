"""Forged replies (issue 26): no in-world code can end the run, change another rollout's record,
or mark its own rollout passed without the verifiers (`tests/forged_catalog.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RLENV, ROOT
from tests.forged_catalog import (
    CASES,
    ForgedRun,
    held,
    rewrite_spawn_attempt,
    run_forged,
    spawn_environment_seen,
)


@pytest.fixture(scope="module")
def forged_run(tmp_path_factory: pytest.TempPathFactory) -> ForgedRun:
    return run_forged(tmp_path_factory.mktemp("forged"), RLENV, ROOT)


@pytest.mark.parametrize(("name", "passes"), [(name, passes) for name, _, passes in CASES])
def test_a_forged_reply_changes_nothing(forged_run: ForgedRun, name: str, passes: bool) -> None:
    ok, detail = held(forged_run, name, passes)
    assert ok, f"{name}: {detail}"


def test_the_forgers_ran(forged_run: ForgedRun) -> None:
    """Not vacuous: every forger's policy ran (its trajectory holds its answer)."""
    assert forged_run.exit_code == 0 or forged_run.records, forged_run.stderr
    for name, _, _ in CASES:
        record = forged_run.records.get(name)
        if record is not None and record["status"] == "ok":
            assert record["answer"] in ("GOLD", "nope"), record


def test_a_rollout_cannot_rewrite_how_workers_start(tmp_path: Path) -> None:
    """The script a replacement worker is exec'd through runs with the orchestrator's
    environment (keys included) before it clears it: no rollout may write it."""
    secret = "sk-spawn-" + "4b1d9e7c2a"
    code, leaked = rewrite_spawn_attempt(tmp_path, RLENV, ROOT, secret)
    assert code == 0
    assert secret not in leaked, "a rollout's code ran with the orchestrator's keys"


def test_the_orchestrator_passes_no_secret_to_a_worker_start(tmp_path: Path) -> None:
    """Better than a script no rollout can reach: the first program a worker is started
    through (`env`, found on PATH) never sees the orchestrator's keys."""
    secret = "sk-start-" + "9c3e1a7b5d"
    code, seen = spawn_environment_seen(tmp_path, RLENV, ROOT, secret)
    assert code == 0
    assert seen, "the worker was not started through `env`: the test saw nothing"
    assert secret not in seen, "a worker's start was passed the orchestrator's keys"
