"""results.jsonl written, tallied and summarised by a process of its own (rlenv.results_aside)
when a run's rollouts call a model over the network: the same lines and summary as in process,
every failure raised where it was before, nothing handed over lost if the orchestrator dies."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlenv.aside_writer import WriterFailed
from rlenv.audit_records import TamperedRun
from rlenv.results import ResultsWriter
from rlenv.results_aside import RESULTS_WRITER_VARIABLE, ResultsAside, start_aside
from rlenv.summary import SummaryInputs, SummaryPlan, _Totals
from tests.chat_server import ChatServer
from tests.conftest import RLENV, ROOT, SEARCH_TOOL, EnvBuilder, cli, probe_report, read_jsonl


def _records(inputs: int = 5, rollouts: int = 2) -> list[dict[str, Any]]:
    return [
        {
            "input_id": f"i{index}",
            "input_index": index,
            "rollout": rollout,
            "status": "ok",
            "passed": (index + rollout) % 2 == 0,
            "reward": 0.25 * rollout,
            "answer": f"answer {index}.{rollout} é",
            "messages": [{"role": "user", "content": f"q{index}"}],
            "extra": {"sent": {"temperature": 0.7, "top_p": 1.0, "seed": 2**52 + index}},
            "usage": {"completion_tokens": 3 + index, "prompt_tokens": 2},
            "timing": {"grader_cache": {"hits": 0, "misses": 1}, "wall_s": 0.125},
            "tool_calls": [],
            "verifiers": [{"name": "exact", "passed": True, "score": 1.0, "type": "exact_match"}],
        }
        for index in range(inputs)
        for rollout in range(rollouts)
    ]


META: dict[str, Any] = {
    "env": {"name": "aside"},
    "model": {"uri": "openai:tiny"},
    "decoding": {"temperature": 0.7, "top_p": 1.0, "max_tokens": 16},
    "rollouts_per_input": 2,
    "inputs": 5,
    "limit": None,
}


def _plan(path: Path, kind: type[SummaryPlan] | None = None) -> SummaryPlan:
    return (kind or SummaryPlan)(SummaryInputs(5), META, path, 0, "openai:tiny")


class PidPlan(SummaryPlan):
    """The summary, with the pid of the process that built it."""

    def build(self, written: _Totals) -> dict[str, Any]:
        return {**super().build(written), "pid": os.getpid()}


class Odd(Exception):
    def __init__(self, first: str, second: str) -> None:  # pickle cannot rebuild it
        super().__init__(f"{first} {second}")


class OddPlan(SummaryPlan):
    def build(self, written: _Totals) -> dict[str, Any]:
        raise Odd("the summary", "failed")


def _inline(path: Path, records: list[Any]) -> dict[str, Any]:
    plan = _plan(path, PidPlan)
    totals = plan.totals()
    writer = ResultsWriter(path, totals.add_line)
    for record in records:
        writer.write(record)
    writer.close()
    return plan.build(totals)


def test_the_writer_writes_the_same_lines_and_builds_the_same_summary(tmp_path: Path) -> None:
    records = _records()
    expected = _inline(tmp_path / "inline.jsonl", records)
    aside = ResultsAside(_plan(tmp_path / "aside.jsonl", PidPlan))
    for record in records:
        aside.write(record)
    summary = aside.finish()
    assert (tmp_path / "aside.jsonl").read_bytes() == (tmp_path / "inline.jsonl").read_bytes()
    assert summary["pid"] == aside.pid != os.getpid()  # built in the writer's process
    assert summary["rollouts"] == 10 and summary["digest"]
    assert {**summary, "pid": 0} == {**expected, "pid": 0}


def test_a_record_pickle_cannot_carry_is_written_as_its_line(tmp_path: Path) -> None:
    class Local(dict):  # type: ignore[type-arg]  # a class pickle cannot name
        pass

    records: list[Any] = _records()
    records[3] = {**records[3], "extra": Local(note="kept")}
    expected = _inline(tmp_path / "inline.jsonl", records)
    aside = ResultsAside(_plan(tmp_path / "aside.jsonl", PidPlan))
    for record in records:
        aside.write(record)
    assert {**aside.finish(), "pid": 0} == {**expected, "pid": 0}
    assert (tmp_path / "aside.jsonl").read_bytes() == (tmp_path / "inline.jsonl").read_bytes()
    assert b'"note":"kept"' in (tmp_path / "aside.jsonl").read_bytes()


def test_a_plan_that_cannot_be_sent_starts_no_writer(tmp_path: Path) -> None:
    class Local(SummaryPlan):  # a class pickle cannot name: the run writes in process
        pass

    assert start_aside(_plan(tmp_path / "r.jsonl", Local)) is None
    started = start_aside(_plan(tmp_path / "r.jsonl"))
    assert started is not None
    started.close()


def test_a_full_disk_in_the_writer_is_raised_here_as_the_writes_error(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    aside = ResultsAside(_plan(Path("/dev/full")))
    with pytest.raises(OSError) as raised:
        for record in _records(5, 2) * 50:  # the error arrives at a later record or the end
            aside.write(record)
        aside.finish()
    assert raised.value.errno == errno.ENOSPC
    aside.close()  # raised once: closing after it is quiet


def test_a_tampered_run_from_the_summary_keeps_its_class_and_place(tmp_path: Path) -> None:
    aside = ResultsAside(_plan(tmp_path / "r.jsonl"))
    records = _records()
    for record in [*records, records[4]]:  # input 2's rollout 0 twice
        aside.write(record)
    with pytest.raises(TamperedRun) as raised:
        aside.finish()
    assert raised.value.where is not None and raised.value.where.startswith(str(tmp_path))
    assert str(raised.value) == f"{raised.value.where}: {raised.value.message}"


def test_an_error_that_cannot_travel_is_sent_as_its_message(tmp_path: Path) -> None:
    aside = ResultsAside(_plan(tmp_path / "r.jsonl", OddPlan))
    with pytest.raises(WriterFailed, match="Odd: the summary failed"):
        aside.finish()


def _started(spec: Path, out: Path, base_url: str) -> subprocess.Popen[str]:
    """`rlenv run` of an outside env in the background (stderr kept), 4 rollouts at a time."""
    command = [
        str(RLENV), "run", str(spec), "--model", "openai:tiny", "--base-url", base_url,
        "--out", str(out), "--concurrency", "4",
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        env={**os.environ, **FAST},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_lines(results: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not results.exists() or results.read_bytes().count(b"\n") < count
    ):
        time.sleep(0.02)


def test_a_killed_writer_ends_the_run_with_one_line(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The OOM killer takes the writer mid-run: exit 1, one line naming it, no traceback; the
    lines written before are whole, and --resume finishes the run."""
    spec = env_builder.write(ECHO, inputs=INPUTS, tools=[SEARCH_TOOL], rollouts=8)
    server = chat(latency_s=STOPPED_SERVER_LATENCY_MS / 1000)
    out = tmp_path / "run"
    running = _started(spec, out, server.base_url)
    writer = None
    deadline = time.monotonic() + 60
    while writer is None and time.monotonic() < deadline:
        for child in psutil.Process(running.pid).children():
            with contextlib.suppress(psutil.Error):  # a short-lived child gone meanwhile
                if "aside_writer" in " ".join(child.cmdline()):
                    writer = child
        time.sleep(0.02)
    assert writer is not None
    _wait_for_lines(out / "results.jsonl", 6)
    writer.kill()
    _, stderr = running.communicate(timeout=60)
    assert running.returncode == 1, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert "results writer" in stderr and "signal 9" in stderr and "--resume" in stderr
    assert (out / "results.jsonl").read_text().endswith("\n")
    assert _run(spec, out, server.base_url, resume=True)["rollouts"] == 48


def test_a_killed_writer_is_named(tmp_path: Path) -> None:
    aside = ResultsAside(_plan(tmp_path / "r.jsonl"))
    aside.write(_records()[0])
    os.kill(aside.pid, signal.SIGKILL)
    with pytest.raises(WriterFailed, match="signal 9"):
        for record in _records() * 2000:  # the pipe fills or breaks
            aside.write(record)
        aside.finish()


def test_close_writes_every_record_without_a_summary(tmp_path: Path) -> None:
    aside = ResultsAside(_plan(tmp_path / "r.jsonl", OddPlan))  # a summary would raise
    for record in _records():
        aside.write(record)
    aside.close()
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 10


LIGHT = """
import os, sys
from pathlib import Path
from rlenv.results_aside import ResultsAside
from tests.test_results_aside import _plan, _records

os.environ["PYTHONPROFILEIMPORTTIME"] = "1"  # for the writer only: this one has its modules
aside = ResultsAside(_plan(Path(sys.argv[1])))
for record in _records():
    aside.write(record)
assert aside.finish()["rollouts"] == 10
"""


def test_the_writer_imports_no_event_loop_http_or_spec_models(tmp_path: Path) -> None:
    """The writer is a process of the run's tree for the whole run: what it imports is memory
    (asyncio with ssl ~4 MB; pydantic, the providers, aiohttp more)."""
    done = subprocess.run(
        [sys.executable, "-c", LIGHT, str(tmp_path / "r.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"rlenv", "orjson", "pickle"} <= imported  # the writer's own, read
    heavy = {"asyncio", "ssl", "pydantic", "aiohttp", "httptools", "uvloop", "typer", "yaml"}
    assert not heavy & imported, heavy & imported


def test_records_waiting_for_their_batch_are_written_when_the_run_stops(tmp_path: Path) -> None:
    """An error or Ctrl-C ends the run within 20 ms of the last records handed over (in an
    event loop they wait for their batch): closing writes them."""

    async def stopped_run() -> None:
        aside = ResultsAside(_plan(tmp_path / "r.jsonl"))
        for record in _records():
            aside.write(record)
        aside.close()

    asyncio.run(stopped_run())
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 10


ORPHAN = """
import asyncio, os, signal, sys
from pathlib import Path
from tests.test_results_aside import _plan, _records
from rlenv.results_aside import ResultsAside

async def main(aside):  # in an event loop, as in a run: the records go over in batches
    for record in _records(50, 10):
        aside.write(record)
        await asyncio.sleep(0)
    await asyncio.sleep(0.2)  # the last batch's timer (20 ms) has fired

aside = ResultsAside(_plan(Path(sys.argv[1])))
if sys.argv[2] == "loop":
    asyncio.run(main(aside))
else:
    for record in _records(50, 10):
        aside.write(record)
print(aside.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the orchestrator dies with 500 records handed over
"""


@pytest.mark.parametrize("caller", ["loop", "plain"])
def test_what_a_killed_orchestrator_handed_over_is_written_whole(
    tmp_path: Path, caller: str
) -> None:
    path = tmp_path / "r.jsonl"
    dying = subprocess.run(
        [sys.executable, "-c", ORPHAN, str(path), caller],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert dying.returncode == -signal.SIGKILL, dying.stderr
    child = int(dying.stdout.split()[0])
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the writer outlived its input"
    text = path.read_text()
    assert text.endswith("\n")
    assert [(r["input_index"], r["rollout"]) for r in map(json.loads, text.splitlines())] == [
        (index, rollout) for index in range(50) for rollout in range(10)
    ]


HOLDER = """
import os, signal, sys
from pathlib import Path
from rlenv.results_aside import ResultsAside
from rlenv.run_dir import _run_dir_lock
from tests.test_results_aside import _plan, _records

with _run_dir_lock(Path(sys.argv[1]), False) as lock:
    aside = ResultsAside(_plan(Path(sys.argv[1]) / "results.jsonl"), hold=lock)
    for record in _records():
        aside.write(record)
    print(aside.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # dies holding the lock, the writer not done
"""


def test_the_writer_holds_the_run_directorys_lock_until_its_last_line(tmp_path: Path) -> None:
    """A run resumed at once after the orchestrator's death must not read results.jsonl
    while the writer still appends to it (a rollout would be run, and written, twice)."""
    from filelock import FileLock, Timeout

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "results.jsonl")  # the writer waits here until the test reads it
    with open(tmp_path / "stderr", "w") as stderr:  # (a pipe would wait for the writer too)
        dying = subprocess.run(
            [sys.executable, "-c", HOLDER, str(run_dir)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert dying.returncode == -signal.SIGKILL, (tmp_path / "stderr").read_text()
    writer = int(dying.stdout.split()[0])
    assert _alive(writer)
    with pytest.raises(Timeout):  # the orchestrator is dead; its writer holds the lock
        FileLock(run_dir / ".rlenv.lock", timeout=0).acquire()
    with open(run_dir / "results.jsonl", "rb") as fifo:
        lines = fifo.read().splitlines()  # to the writer's close: its last line
    assert len(lines) == 10
    deadline = time.monotonic() + 30
    while _alive(writer) and time.monotonic() < deadline:
        time.sleep(0.05)
    lock = FileLock(run_dir / ".rlenv.lock", timeout=5)
    lock.acquire()  # free once the writer is gone
    lock.release()


STOPPED_SERVER_LATENCY_MS = 200


def test_an_outside_run_stopped_by_ctrl_c_resumes_to_a_clean_runs_digest(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(ECHO, inputs=INPUTS * 1, tools=[SEARCH_TOOL], rollouts=8)
    server = chat(latency_s=STOPPED_SERVER_LATENCY_MS / 1000)
    clean = _run(spec, tmp_path / "clean", server.base_url)
    out = tmp_path / "run"
    running = _started(spec, out, server.base_url)
    results = out / "results.jsonl"
    _wait_for_lines(results, 6)
    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=60)
    assert running.returncode == 130, stderr
    text = results.read_text()
    assert text.endswith("\n")
    kept = [json.loads(line) for line in text.splitlines()]  # every line whole
    assert 6 <= len(kept) < 48 and not (out / "summary.json").exists()
    resumed = _run(spec, out, server.base_url, resume=True)
    assert resumed["digest"] == clean["digest"] and resumed["rollouts"] == 48
    assert read_jsonl(results)[: len(kept)] == kept


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# -- a whole run -------------------------------------------------------------------------------

ECHO = """
def search(args, ctx):
    return "result for " + args["query"]
"""

INPUTS = [{"id": f"q{n}", "prompt": f"say {n}", "answer": f"{n}"} for n in range(6)]
FAST = {"RLENV_OPENAI_BACKOFF_S": "0"}


def _run(
    spec: Path, out: Path, base_url: str, *, resume: bool = False, **env: str
) -> dict[str, Any]:
    result = cli(
        "run", str(spec), "--model", "openai:tiny", "--base-url", base_url, "--out", str(out),
        "--concurrency", "8", *(["--resume"] if resume else []), env={**FAST, **env},
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _comparable(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    records = sorted(
        read_jsonl(out / "results.jsonl"), key=lambda r: (r["input_index"], r["rollout"])
    )
    for record in records:
        record["timing"].pop("wall_s")
    summary = json.loads((out / "summary.json").read_text())
    for volatile in ("model", "run_json_digest", "created", "timing", "wall_s"):
        summary.pop(volatile, None)
    return records, summary


def test_an_outside_run_is_the_same_run_written_aside_or_inline(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(ECHO, inputs=INPUTS, tools=[SEARCH_TOOL], rollouts=3)
    server = chat()
    aside = _run(spec, tmp_path / "aside", server.base_url)
    inline = _run(spec, tmp_path / "inline", server.base_url, **{RESULTS_WRITER_VARIABLE: "inline"})
    assert aside["digest"] == inline["digest"] and aside["rollouts"] == 18
    assert _comparable(tmp_path / "aside") == _comparable(tmp_path / "inline")


WHO_WRITES = """
import json, os, sys
from rlenv import results
from typer.testing import CliRunner
from rlenv.cli import app

writes = []
write_encoded = results.ResultsWriter.write_encoded

def spied(self, encoded):  # in this process only: a writer of its own is a fresh interpreter
    writes.append(os.getpid())
    return write_encoded(self, encoded)

results.ResultsWriter.write_encoded = spied
outcome = CliRunner().invoke(app, ["run", *sys.argv[1:]])
assert outcome.exit_code == 0, outcome.output
print(json.dumps({"orchestrator": os.getpid(), "writes": writes}), file=sys.stderr)
"""


WRITERS = {
    "outside": True,  # openai: its calls go over the network
    "replayed": True,  # replay: rlenv's own policy, no env code in the conversation
    "in-world": False,  # python: env code, a process per rollout
    "replayed with a tool": False,  # the tool is env code
    "inline": False,  # RLENV_RESULTS_WRITER=inline
}


@pytest.mark.parametrize("policy", list(WRITERS))
def test_which_process_writes_the_lines(
    chat: Callable[..., ChatServer],
    env_builder: EnvBuilder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
) -> None:
    """The lines are written by a process of their own when the orchestrator's core is what
    limits the run (its rollouts cost the workers little), by the orchestrator otherwise."""
    tools = {"tools": [SEARCH_TOOL]} if policy == "replayed with a tool" else {}
    spec = env_builder.write(
        ECHO + "\ndef policy(messages, tools, ctx):\n    return 'x'\n", inputs=INPUTS[:2], **tools
    )
    server = chat()
    model: list[str] = []
    if policy in ("outside", "inline"):
        model = ["--model", "openai:tiny", "--base-url", server.base_url]
    elif policy.startswith("replayed"):
        answers = tmp_path / "answers.jsonl"
        answers.write_text(
            "".join(
                json.dumps({"input_id": f"q{n}", "rollout": r, "answer": str(n)}) + "\n"
                for n in range(2)
                for r in range(2)
            )
        )
        model = ["--model", f"replay:{answers}"]
    script = tmp_path / "who.py"
    script.write_text(textwrap.dedent(WHO_WRITES))
    if policy == "inline":
        monkeypatch.setenv(RESULTS_WRITER_VARIABLE, "inline")
    run = [str(spec), "--out", str(tmp_path / "run"), *model]
    report = probe_report([str(script), *run], cwd=ROOT)
    assert len(read_jsonl(tmp_path / "run" / "results.jsonl")) == 4
    here = [report["orchestrator"]] * 4
    assert report["writes"] == ([] if WRITERS[policy] else here)
