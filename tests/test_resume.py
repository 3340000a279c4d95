"""Crash-resume: SIGKILL a real run at several points; --resume finishes with the same digest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import RLENV, EnvBuilder, cli, read_jsonl

SLOW_POLICY = """
import time
def policy(messages, tools, ctx):
    time.sleep(0.03)  # real time passes; the frozen clock does not
    return messages[-1]["content"].split()[-1] if ctx.rng.random() < 0.7 else "nope"
"""


def _inputs(count: int) -> list[dict]:
    return [{"id": f"i{n:03d}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(count)]


def _start(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(RLENV), "run", str(spec), "--out", str(out), "--json", "--concurrency", "2", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for_lines(path: Path, count: int, process: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        if process.poll() is not None:
            pytest.fail("run finished before the kill point")
        time.sleep(0.01)
    pytest.fail("kill point not reached")


def _kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # orchestrator and its workers
    process.wait()


@pytest.fixture
def slow_env(env_builder: EnvBuilder) -> Path:
    return env_builder.write(SLOW_POLICY, inputs=_inputs(30), rollouts=2)


def test_kill_at_several_points_then_resume(slow_env: Path, tmp_path: Path) -> None:
    reference = cli("run", str(slow_env), "--out", str(tmp_path / "whole"), "--json")
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)["digest"]
    out = tmp_path / "killed"
    results = out / "results.jsonl"
    points = [0, 7, 25, 48]
    for point in points:
        process = _start(slow_env, out, *(["--resume"] if results.exists() else []))
        if point == 0:
            deadline = time.monotonic() + 60
            while not (out / "run.json").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            _wait_for_lines(results, point, process)
        _kill(process)
    # a torn last line, as if the kill landed mid-write
    with open(results, "ab") as handle:
        handle.write(b'{"input_id":"i0')
    finished = cli("run", str(slow_env), "--out", str(out), "--resume", "--json")
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["digest"] == expected
    records = read_jsonl(results)
    keys = [(r["input_id"], r["rollout"]) for r in records]
    assert len(keys) == 60 and len(set(keys)) == 60, "nothing lost, nothing duplicated"
    print(f"resume points tested: {len(points) + 1} (kills at {points} lines + torn line)")


def test_resume_of_a_finished_run_does_nothing_new(slow_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "done"
    first = cli("run", str(slow_env), "--out", str(out), "--json", "--limit", "3")
    before = (out / "results.jsonl").read_bytes()
    again = cli("run", str(slow_env), "--out", str(out), "--json", "--limit", "3", "--resume")
    assert again.returncode == 0
    assert (out / "results.jsonl").read_bytes() == before
    assert json.loads(again.stdout)["digest"] == json.loads(first.stdout)["digest"]
