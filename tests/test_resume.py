"""Crash-resume: SIGKILL a real run at several points; --resume finishes with the same digest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import RLENV, EnvBuilder, cli, read_jsonl

GATED_POLICY = """
import fcntl, pathlib, threading
GATE = pathlib.Path({gate!r})

def admit():
    # the test's kill points, without racing the clock: while GATE/budget exists, only that
    # many policy calls (one per rollout) go through; the next ones block until the kill
    budget = GATE / "budget"
    if not budget.exists():
        return
    with open(GATE / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        calls = GATE / "calls"
        done = int(calls.read_text()) if calls.exists() else 0
        if done < int(budget.read_text()):
            calls.write_text(str(done + 1))
            return
    threading.Event().wait()

def policy(messages, tools, ctx):
    admit()
    return messages[-1]["content"].split()[-1] if ctx.rng.random() < 0.7 else "nope"
"""
DEADLINE_S = 120.0  # generous: a loaded machine is slow, never wrong


def _inputs(count: int) -> list[dict]:
    return [{"id": f"i{n:03d}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(count)]


def _start(spec: Path, out: Path, gate: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(RLENV), "run", str(spec), "--out", str(out), "--json", "--concurrency", "2", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        # the gate is a channel the test opens: without it each rollout writes its count into
        # its worker's private /tmp and every call is admitted (the kill points were luck)
        env={**os.environ, "RLENV_WORLD_SHARED": str(gate)},
    )


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    """Poll for an event (a file appearing, a line count) up to a generous deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while not ready():
        if process.poll() is not None:
            pytest.fail(f"run finished before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {DEADLINE_S} s")
        time.sleep(0.01)


def _kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # orchestrator and its workers
    process.wait()


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    path = tmp_path / "gate"
    path.mkdir()
    return path


@pytest.fixture
def slow_env(env_builder: EnvBuilder, gate: Path) -> Path:
    return env_builder.write(GATED_POLICY.format(gate=str(gate)), inputs=_inputs(30), rollouts=2)


def test_kill_at_several_points_then_resume(slow_env: Path, gate: Path, tmp_path: Path) -> None:
    reference = cli("run", str(slow_env), "--out", str(tmp_path / "whole"), "--json")
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)["digest"]
    out = tmp_path / "killed"
    results = out / "results.jsonl"
    points = [0, 7, 25, 48]
    for point in points:
        # this run may complete exactly the rollouts up to the kill point, then it blocks
        (gate / "calls").write_text("0")
        before = _lines(results)
        (gate / "budget").write_text(str(point - before))
        process = _start(slow_env, out, gate, *(["--resume"] if results.exists() else []))
        if point == 0:
            _wait_until((out / "run.json").exists, process, "run.json appeared")
        else:
            _wait_until(lambda n=point: _lines(results) >= n, process, f"{point} results lines")
        _kill(process)
        assert _lines(results) == point, "the kill landed exactly at the point"
        # the gate held: exactly the budget went through, the rest were blocked in admit()
        assert int((gate / "calls").read_text()) == point - before
    (gate / "budget").unlink()  # the resumed run goes through to the end
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


def test_resume_refuses_a_whole_line_that_is_not_json(slow_env: Path, tmp_path: Path) -> None:
    """Only a torn last line (a write cut short) may be cut off on --resume; a line that does
    not parse with lines after it was changed after the run wrote it: refused, exit 2, the
    line named, and not a byte of results.jsonl lost (it used to be cut there, and every
    record after it with it). A broken last line is taken for a torn one: made again."""
    out = tmp_path / "run"
    first = cli("run", str(slow_env), "--out", str(out), "--json", "--limit", "3")
    assert first.returncode == 0, first.stderr
    results = out / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    middle = list(lines)
    middle[1] = b'{"input_id": "i0", garbage\n'
    results.write_bytes(b"".join(middle))
    again = cli("run", str(slow_env), "--out", str(out), "--json", "--limit", "3", "--resume")
    assert again.returncode == 2, again.stderr
    assert "results.jsonl:2: not a JSON record" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    assert results.read_bytes() == b"".join(middle)
    last = lines[:-1] + [b'{"input_id": "i0", garbage\n']
    results.write_bytes(b"".join(last))
    again = cli("run", str(slow_env), "--out", str(out), "--json", "--limit", "3", "--resume")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["digest"] == json.loads(first.stdout)["digest"]
