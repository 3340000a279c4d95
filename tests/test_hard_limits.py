"""limits.timeout_s is enforced from outside the worker; nothing a rollout started outlives it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlenv.runner import RunSettings, run
from tests.conftest import RLENV, EnvBuilder, cli, read_jsonl, sha256

LIMITS = {"timeout_s": 1}

# Each input's id names what its rollout does; "ok0"/"ok1" behave. Timer-proof ones can only be
# stopped by the orchestrator killing the worker; the others by the in-worker alarm alone.
OVERRUNS = """
import ctypes, os, signal, threading, time

def misbehave(mode):
    if mode == "policy_loops":
        while True:
            pass
    if mode == "policy_swallows_timeout":
        while True:
            try:
                time.sleep(5)
            except BaseException:
                pass
    if mode == "policy_swallows_once":  # catches the alarm, then answers as if in time
        try:
            time.sleep(5)
        except BaseException:
            pass
    if mode == "policy_blocks_sigalrm":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    if mode == "policy_c_sleep_in_thread":  # a C call in a thread, the main thread deaf
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        worker = threading.Thread(target=lambda: ctypes.CDLL(None).sleep(60))
        worker.start()
        worker.join()
    if mode == "policy_sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "policy_segfault":
        ctypes.string_at(0)

def policy(messages, tools, ctx):
    mode = messages[-1]["content"].split()[-1] if messages[-1]["role"] == "user" else ""
    if mode.startswith("policy_"):
        misbehave(mode)
    if mode.startswith("tool_"):
        call = {"id": "c", "function": {"name": "spin", "arguments": "{}"}}
        return {"content": None, "tool_calls": [call]}
    return messages[0]["content"].split()[-1]

def spin(args, ctx):
    if ctx.input_id == "tool_ignores_sigalrm":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            pass
    return "done"

def check(answer, data, ctx):
    if data["id"] == "verifier_loops":
        while True:
            pass
    if data["id"] == "verifier_swallows_timeout":
        while True:
            try:
                time.sleep(5)
            except BaseException:
                pass
    return answer == data["id"]

def reward(prompt, answer, ctx):
    if ctx.input["id"] == "reward_loops":
        while True:
            try:
                time.sleep(5)
            except BaseException:
                pass
    return 1.0
"""
TIMEOUTS = [
    "policy_loops",
    "policy_swallows_timeout",
    "policy_swallows_once",
    "policy_blocks_sigalrm",
    "policy_c_sleep_in_thread",
    "tool_ignores_sigalrm",
    "verifier_loops",
    "verifier_swallows_timeout",
    "reward_loops",
]
DEATHS = {"policy_segfault": "SIGSEGV"}
# A policy SIGKILLing its own worker: where the worker is pid 1 of its own pid namespace the
# kernel ignores the signal (nothing inside can kill it: the rollout goes on, "ok"); without a
# pid namespace the worker dies and the rollout is a policy_error. Never a hang or a lost run.
SELF_KILL = "policy_sigkill"
CONTROLS = ["ok0", "ok1"]  # first in the inputs: `--limit 2` runs only them


def _overrun_env(builder: EnvBuilder) -> Path:
    builder.root.mkdir(parents=True, exist_ok=True)
    prompts = builder.root / "prompts.jsonl"
    prompts.write_text('{"id": "p", "prompt": "unrelated"}\n')
    modes = CONTROLS + TIMEOUTS + sorted(DEATHS) + [SELF_KILL]
    return builder.write(
        OVERRUNS,
        inputs=[{"id": mode, "prompt": f"do {mode}"} for mode in modes],
        rollouts=1,
        limits=LIMITS,
        tools=[{"name": "spin", "function": "MOD:spin", "parameters": {"type": "object"}}],
        verifiers=[{"type": "python", "function": "MOD:check"}],
        reward_model={
            "function": f"{builder.module}:reward",
            "training_prompts": {"path": "prompts.jsonl", "sha256": sha256(prompts)},
        },
    )


@pytest.fixture(scope="module")
def overrun_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """One run of every overrun, two workers at a time (so one overruns while the other
    works); (spec, run dir, --json summary)."""
    root = tmp_path_factory.mktemp("overruns")
    spec = _overrun_env(EnvBuilder(root / "env"))
    out = root / "run"
    result = cli("run", str(spec), "--out", str(out), "--json", "--concurrency", "2", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return spec, out, json.loads(result.stdout)


@pytest.mark.parametrize("mode", TIMEOUTS)
def test_an_overrun_is_a_timeout(overrun_run: tuple[Path, Path, dict], mode: str) -> None:
    _, out, _ = overrun_run
    record = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}[mode]
    assert record["status"] == "timeout", (mode, record["status"], record["error"])
    # the same record however it was stopped (alarm or kill): nothing timing-dependent
    assert record["error"] == "rollout exceeded limits.timeout_s (1 s)", mode
    assert record["passed"] is False and record["answer"] is None, mode
    assert record["verifiers"] == [] and record["tool_calls"] == [], mode
    assert record["reward"] is None and record["world"] == {}, mode


@pytest.mark.parametrize("mode", sorted(DEATHS))
def test_a_worker_death_is_an_error_status(overrun_run: tuple[Path, Path, dict], mode: str) -> None:
    _, out, _ = overrun_run
    record = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}[mode]
    assert record["status"] == "policy_error", (mode, record)
    assert record["error"] == f"the worker process died in the policy (killed by {DEATHS[mode]})"
    assert record["passed"] is False


def test_the_run_goes_on_and_writes_its_summary(overrun_run: tuple[Path, Path, dict]) -> None:
    _, out, summary = overrun_run
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    for mode in CONTROLS:
        assert records[mode]["status"] == "ok" and records[mode]["passed"] is True, mode
    assert summary["rollouts"] == len(records) == len(CONTROLS) + len(TIMEOUTS) + len(DEATHS) + 1
    killed = records[SELF_KILL]["status"]
    assert killed in ("ok", "policy_error"), records[SELF_KILL]
    expected = {"ok": len(CONTROLS), "timeout": len(TIMEOUTS), "policy_error": len(DEATHS)}
    expected[killed] += 1
    assert summary["counts"] == expected
    assert json.loads((out / "summary.json").read_text())["digest"] == summary["digest"]


def test_an_overrun_does_not_change_the_other_rollouts(
    overrun_run: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    spec, out, _ = overrun_run
    clean = tmp_path / "clean"
    result = cli("run", str(spec), "--out", str(clean), "--json", "--limit", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    digests = {r["input_id"]: r["digest"] for r in read_jsonl(out / "results.jsonl")}
    assert {r["input_id"]: r["digest"] for r in read_jsonl(clean / "results.jsonl")} == {
        mode: digests[mode] for mode in CONTROLS
    }


def test_one_worker_batches_lose_only_the_overrunning_rollouts(
    overrun_run: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    """On one worker the rollouts go in batches of several (one request, an answer each): a
    rollout killed or dead mid-batch is lost alone, the ones the batch had not reached run
    again on the fresh worker, and every record is the two-worker run's."""
    spec, out, summary = overrun_run
    single = tmp_path / "single"
    result = cli(
        "run", str(spec), "--out", str(single), "--json", "--concurrency", "1", timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_jsonl(single / "results.jsonl")
    assert len(records) == summary["rollouts"]
    ours = {r["input_id"]: r["digest"] for r in records}
    assert ours == {r["input_id"]: r["digest"] for r in read_jsonl(out / "results.jsonl")}
    assert json.loads(result.stdout)["digest"] == summary["digest"]


def test_resume_after_killed_workers_gives_the_same_digest(
    overrun_run: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    """Drop the records of a killed worker's rollout, a dead worker's and a good one, resume:
    they are made again, identical, and the run digest is the first run's."""
    _, out, summary = overrun_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    dropped = {"policy_blocks_sigalrm", "policy_sigkill", "ok1"}
    lines = (copy / "results.jsonl").read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["input_id"] not in dropped]
    (copy / "results.jsonl").write_text("".join(kept))
    result = cli(
        "run",
        "--resume",
        "--out",
        str(copy),
        "--json",
        "--concurrency",
        "2",
        json.loads((out / "run.json").read_text())["spec"],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["digest"] == summary["digest"]
    before = {r["input_id"]: r["digest"] for r in read_jsonl(out / "results.jsonl")}
    after = {r["input_id"]: r["digest"] for r in read_jsonl(copy / "results.jsonl")}
    assert after == before


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
    return messages[0]["content"].split()[-1]
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
        env={"RLENV_TEST_PIDS_FILE": str(pids_file), "RLENV_WORLD_SHARED": str(tmp_path)},
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
        "RLENV_WORLD_SHARED": str(tmp_path),  # the gates: a channel the test opens
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


OUTSIDE_TOOLS = """
import signal, time

def search(args, ctx):
    if args["query"].startswith("deaf"):  # the alarm blocked: only the kill stops it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return "result for " + args["query"]

def check(answer, data, ctx):
    if data["id"] == "grader_loops":  # the verifier swallows the alarm
        while True:
            try:
                time.sleep(5)
            except BaseException:
                pass
    return answer == "result for say " + data["id"]
"""


def test_overruns_with_the_policy_outside_the_world(
    chat: Callable[..., Any], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """An HTTP policy: the tool call and the grading run in workers under what is left of the
    rollout's time; a worker stuck in either is killed, the record is the same timeout record."""
    server = chat()
    inputs = [
        {"id": "a", "prompt": "say a"},
        {"id": "deaf", "prompt": "deaf tool"},
        {"id": "grader_loops", "prompt": "say grader_loops"},
        {"id": "b", "prompt": "say b"},
    ]
    spec = env_builder.write(
        OUTSIDE_TOOLS,
        inputs=inputs,
        rollouts=1,
        # first calls (connection, imports) fall in the rollouts' time: room on a loaded machine
        limits={"max_turns": 3, "timeout_s": 4},
        tools=[
            {
                "name": "search",
                "function": "MOD:search",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            }
        ],
        verifiers=[{"type": "python", "function": "MOD:check"}],
    )
    result = run(
        spec,
        RunSettings(
            model="openai:tiny", base_url=server.base_url, out=tmp_path / "run", concurrency=2
        ),
    )
    assert result.summary["counts"] == {"ok": 2, "timeout": 2}
    records = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    assert records["a"]["passed"] is records["b"]["passed"] is True
    for name in ("deaf", "grader_loops"):
        assert records[name]["error"] == "rollout exceeded limits.timeout_s (4 s)", name
        assert records[name]["verifiers"] == [] and records[name]["messages"] == [
            {"role": "user", "content": inputs[[i["id"] for i in inputs].index(name)]["prompt"]}
        ]


LATE = """
import signal, time

def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]

def slow_check(answer, data, ctx):
    if answer == "a":  # deaf to the alarm: only the kill stops it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return True
"""


def test_a_late_verifier_that_overruns_is_killed_by_grade(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(
        LATE,
        rollouts=1,
        limits=LIMITS,
        verifiers=[{"type": "python", "function": "MOD:slow_check", "cost": "expensive"}],
    )
    out = tmp_path / "run"
    first = cli("run", str(spec), "--out", str(out), "--json", "--defer-expensive")
    assert first.returncode == 0, first.stderr[-2000:]
    graded = cli("grade", str(out), "--json", "--no-grader-cache")
    assert graded.returncode == 0, graded.stderr[-2000:]
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    assert records["a"]["status"] == "timeout" and records["a"]["passed"] is False
    assert records["a"]["verifiers"][0]["detail"] == "not graded: timeout"
    assert records["b"]["status"] == "ok" and records["b"]["passed"] is True
    assert cli("check", str(out)).returncode == 0


KILLED_FROM_OUTSIDE = """
import os
def policy(messages, tools, ctx):
    word = messages[-1]["content"].split()[-1]
    if word == "a":  # says where it is, then waits for a release that never comes
        with open(os.environ["RLENV_TEST_GATE_STARTED"], "w") as started:
            started.write(str(os.getpid()))
        with open(os.environ["RLENV_TEST_GATE_RELEASE"]) as release:
            release.read()
    return word
"""


def _host_pid(candidates: list[psutil.Process], inner: int) -> int:
    """The host pid of the process numbered ``inner`` in its own (innermost) pid namespace."""
    for process in candidates:
        try:
            status = Path(f"/proc/{process.pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            fields = line.split()
            nested = len(fields) > 2 or inner == process.pid  # own namespace, or none at all
            if fields[:1] == ["NSpid:"] and int(fields[-1]) == inner and nested:
                return process.pid
    raise AssertionError(f"no process is pid {inner} of its namespace")


def test_a_worker_killed_from_outside_costs_only_its_rollout(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The OOM killer (or an operator) SIGKILLs a worker mid-rollout: that rollout is the
    error of the part that was running, a fresh worker takes the rest, the run writes its
    summary; nothing hangs."""
    inputs = [{"id": i, "prompt": f"say {i}", "answer": i} for i in ("a", "b", "c")]
    spec = env_builder.write(KILLED_FROM_OUTSIDE, inputs=inputs, rollouts=1)
    started, release = tmp_path / "started", tmp_path / "release"
    os.mkfifo(started)
    os.mkfifo(release)
    out = tmp_path / "run"
    orchestrator = subprocess.Popen(
        [str(RLENV), "run", str(spec), "--out", str(out), "--json", "--concurrency", "1"],
        env={
            **os.environ,
            "RLENV_TEST_GATE_STARTED": str(started),
            "RLENV_TEST_GATE_RELEASE": str(release),
            "RLENV_WORLD_SHARED": str(tmp_path),  # the gates: a channel the test opens
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with open(started) as reader:  # blocks until input a's policy runs in a worker
            inner = int(reader.read())
        descendants = psutil.Process(orchestrator.pid).children(recursive=True)
        os.kill(_host_pid(descendants, inner), signal.SIGKILL)
        stdout, stderr = orchestrator.communicate(timeout=120)
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
    assert orchestrator.returncode == 0, stderr
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    assert records["a"]["status"] == "policy_error", records["a"]
    # (under `unshare --pid` the wrapper cannot re-raise a SIGKILL and exits 1: the error says
    # the worker died in the policy, not by which signal)
    assert records["a"]["error"].startswith("the worker process died in the policy")
    assert records["b"]["status"] == records["c"]["status"] == "ok"
    assert json.loads(stdout)["counts"] == {"ok": 2, "policy_error": 1}
