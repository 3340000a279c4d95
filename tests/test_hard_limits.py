"""limits.timeout_s is enforced from outside the worker; nothing a rollout started outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import RLENV, EnvBuilder, cli, read_jsonl

LIMITS = {"timeout_s": 1}

ATTACKS = {
    "verifier_loops": """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]

def check(answer, data, ctx):
    while answer == "a":
        pass
    return True
""",
    "policy_swallows_timeout": """
import time
def policy(messages, tools, ctx):
    word = messages[-1]["content"].split()[-1]
    while word == "a":
        try:
            time.sleep(5)
        except BaseException:
            pass
    return word

def check(answer, data, ctx):
    return True
""",
    "tool_ignores_sigalrm": """
import signal
def spin(args, ctx):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        pass

def policy(messages, tools, ctx):
    word = messages[-1]["content"].split()[-1]
    if word == "a" and len(messages) < 3:
        return {"tool_calls": [{"id": "c", "function": {"name": "spin", "arguments": "{}"}}]}
    return word

def check(answer, data, ctx):
    return True
""",
}


@pytest.mark.xfail(
    run=False,  # each would hang until the cli timeout (60 s) today
    reason="issue 12 item 4, not built yet: the orchestrator does not kill an overrunning worker",
)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_overrun_is_killed_and_the_run_goes_on(
    env_builder: EnvBuilder, tmp_path: Path, attack: str
) -> None:
    spec = env_builder.write(
        ATTACKS[attack],
        rollouts=1,
        limits=LIMITS,
        verifiers=[{"type": "python", "function": "MOD:check"}],
        tools=[{"name": "spin", "function": "MOD:spin", "parameters": {"type": "object"}}]
        if "spin" in ATTACKS[attack]
        else [],
    )
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out), "--json", "--concurrency", "1", timeout=60)
    assert result.returncode == 0, result.stderr
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    assert records["a"]["status"] == "timeout"
    assert records["b"]["status"] == "ok" and records["b"]["passed"] is True
    assert json.loads(result.stdout)["rollouts"] == 2


SPAWNER = """
import os, subprocess
def spawn(args, ctx):
    child = subprocess.Popen(["sleep", "1000.4242"], start_new_session=True)
    orphan = subprocess.run(
        ["setsid", "sh", "-c", "sleep 1001.4242 >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True,
    ).stdout.strip()
    with open(os.environ["RLENV_TEST_PIDS_FILE"], "a") as handle:
        handle.write(f"{child.pid}\\n{orphan}\\n")
    return "spawned"

def policy(messages, tools, ctx):
    if len(messages) < 3:
        return {"tool_calls": [{"id": "c", "function": {"name": "spawn", "arguments": "{}"}}]}
    return messages[1]["content"].split()[-1]
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_processes_a_rollout_starts_are_gone_when_it_ends(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(
        SPAWNER,
        rollouts=1,
        tools=[{"name": "spawn", "function": "MOD:spawn", "parameters": {"type": "object"}}],
    )
    pids_file = tmp_path / "pids"
    result = cli(
        "run",
        str(spec),
        "--out",
        str(tmp_path / "run"),
        "--json",
        env={"RLENV_TEST_PIDS_FILE": str(pids_file)},
    )
    assert result.returncode == 0, result.stderr
    pids = [int(line) for line in pids_file.read_text().split()]
    assert len(pids) == 4  # started (pids as the worker's own pid namespace numbers them)
    procs = [p for p in psutil.process_iter(["cmdline"]) if _spawned(p.info["cmdline"])]
    _, alive = psutil.wait_procs(procs, timeout=5)
    assert not [p.pid for p in alive if _alive(p.pid)], "a rollout's process outlived the run"


def _spawned(cmdline: list[str] | None) -> bool:
    """One of SPAWNER's sleeps, found from the host (the worker has its own pid namespace)."""
    return bool(cmdline) and any(arg.endswith(".4242") for arg in cmdline or [])


BLOCKER = """
import os
def policy(messages, tools, ctx):
    with open(os.environ["RLENV_TEST_GATE_STARTED"], "w") as started:
        started.write(str(os.getpid()))
    with open(os.environ["RLENV_TEST_GATE_RELEASE"]) as release:
        release.read()
    return "x"
"""


def test_workers_die_with_the_orchestrator(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(BLOCKER, rollouts=1)
    started, release = tmp_path / "started", tmp_path / "release"
    os.mkfifo(started)
    os.mkfifo(release)
    env = {
        **os.environ,
        "RLENV_TEST_GATE_STARTED": str(started),
        "RLENV_TEST_GATE_RELEASE": str(release),
    }
    orchestrator = subprocess.Popen(
        [str(RLENV), "run", str(spec), "--out", str(tmp_path / "run"), "--limit", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with open(started) as reader:  # blocks until the policy runs in a worker
        assert int(reader.read()) > 0  # its pid in its own pid namespace
    workers = psutil.Process(orchestrator.pid).children(recursive=True)
    assert workers
    orchestrator.send_signal(signal.SIGKILL)
    orchestrator.wait()
    _, alive = psutil.wait_procs(workers, timeout=10)
    leftover = [p.pid for p in alive if _alive(p.pid)]
    if leftover:  # unblock and clean up before failing
        os.close(os.open(release, os.O_RDWR | os.O_NONBLOCK))
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    assert not leftover, "workers outlived the SIGKILLed orchestrator"
