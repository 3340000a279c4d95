"""`--executor ray`: the same rollouts on Ray actors, with the local executor's digest.

One small local Ray instance serves the whole module (2 CPUs, no dashboard, a 256 MB object
store). Every comparison is against a real local run of the same env.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from rlenv.errors import RunFailed, UserError, WorkerLost  # noqa: E402
from rlenv.executors.ray import RayExecutor, import_ray  # noqa: E402
from rlenv.results import RolloutRecord  # noqa: E402
from rlenv.runner import RunResult, RunSettings, run  # noqa: E402
from rlenv.worker.config import RolloutTask, WorkerConfig  # noqa: E402
from tests.chat_server import ChatServer  # noqa: E402
from tests.conftest import ROOT, SEARCH_TOOL, EnvBuilder, cli, local_ray, read_jsonl  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    """A local Ray instance for the module; executors find it running and leave it running."""
    with local_ray(num_cpus=2, store_mb=256):
        yield


def both(spec: Path, tmp_path: Path, **options: Any) -> tuple[RunResult, RunResult]:
    local = run(spec, RunSettings(out=tmp_path / "local", **options))
    on_ray = run(spec, RunSettings(out=tmp_path / "ray", executor="ray", **options))
    return local, on_ray


def assert_each_rollout_once(run_dir: Path, inputs: list[str], rollouts: int) -> None:
    records = read_jsonl(run_dir / "results.jsonl")
    counts = Counter((record["input_id"], record["rollout"]) for record in records)
    expected = {(input_id, rollout) for input_id in inputs for rollout in range(rollouts)}
    assert set(counts) == expected and set(counts.values()) == {1}


def first_ids(path: Path, count: int) -> list[str]:
    return [record["id"] for record in read_jsonl(path)[:count]]


# the search env (cassette, reward model, helper package) on Ray: tests/test_ray_cluster.py,
# on two nodes without shared files
@pytest.mark.parametrize(("env", "inputs"), [("file_edit", "fixtures/file_edit/inputs.jsonl")])
def test_bundled_env_on_ray_has_the_local_digest(env: str, inputs: str, tmp_path: Path) -> None:
    local, on_ray = both(ROOT / "envs" / f"{env}.yaml", tmp_path, limit=5)
    assert local.summary["rollouts"] == on_ray.summary["rollouts"] == 10
    assert on_ray.digest == local.digest
    assert on_ray.summary["counts"] == local.summary["counts"]
    assert on_ray.summary["world"]["network_guard"] == "python"
    if env == "search":
        assert on_ray.summary["fixtures"] == local.summary["fixtures"]
        assert set(on_ray.summary["fixtures"]) == {"hit"}, "tool HTTP replayed inside the actors"
    for result in (local, on_ray):
        assert_each_rollout_once(result.run_dir, first_ids(ROOT / inputs, 5), 2)
    meta = json.loads((on_ray.run_dir / "run.json").read_text())
    assert meta["executor"] == "ray"


PROBE = """
import datetime, json, os, socket, sys, time

PORT = {port}

def probe(args, ctx):
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
        network = "reached"
    except OSError as exc:
        network = type(exc).__name__
    return {{
        "now": datetime.datetime.now().isoformat(),
        "time": time.time(),
        "monotonic": time.monotonic(),
        "hash": str(hash("frozen")),
        "tz": [*time.tzname, os.environ.get("TZ"), os.environ.get("LC_ALL")],
        "cwd_is_workdir": os.getcwd() == str(ctx.workdir),
        "network": network,
        # an actor's worker imports the env the actor unpacked (its root: ray-actor-*)
        "unpacked_by_actor": "/ray-actor-" in __file__,
        "ray_imported": "ray" in sys.modules,
    }}

def policy(messages, tools, ctx):
    if messages[-1]["role"] == "user":
        function = {{"name": "probe", "arguments": "{{}}"}}
        call = {{"id": "c0", "type": "function", "function": function}}
        return {{"role": "assistant", "content": None, "tool_calls": [call]}}
    return "done"
"""


def test_actor_world_is_frozen_like_a_local_worker(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The in-world policy's tool sees the same world locally and on Ray (in the worker an
    actor hosts, which never imports Ray); so does a tool called for a model outside the
    world."""
    server = chat()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        other.setblocking(False)
        spec = env_builder.write(
            PROBE.format(port=other.getsockname()[1]),
            inputs=[{"id": "a", "prompt": "probe", "answer": "done"}],
            tools=[{"name": "probe", "function": "MOD:probe", "parameters": {"type": "object"}}],
            rollouts=1,
        )
        local, on_ray = both(spec, tmp_path)
        outside = run(
            spec,
            RunSettings(
                out=tmp_path / "outside",
                executor="ray",
                model="openai:tiny",
                base_url=server.base_url,
            ),
        )
        with pytest.raises(BlockingIOError):
            other.accept()  # no world connected
    probes = {}
    for name, result in (("local", local), ("ray", on_ray), ("outside", outside)):
        (record,) = read_jsonl(result.run_dir / "results.jsonl")
        assert record["status"] == "ok"
        probes[name] = json.loads(record["messages"][2]["content"])
    assert probes["local"]["unpacked_by_actor"] is False
    assert probes["ray"]["unpacked_by_actor"] is True
    assert probes["ray"]["ray_imported"] is False, "env code runs in a worker, not in the actor"
    assert probes["ray"]["now"] == "2024-03-01T12:00:00"
    assert probes["ray"]["time"] == probes["ray"]["monotonic"] == 1709294400.0
    assert probes["ray"]["network"] == "NetworkRefused"
    assert probes["ray"]["tz"] == ["UTC", "UTC", "UTC", "C.UTF-8"]
    assert probes["ray"]["cwd_is_workdir"] is True
    assert probes["outside"] == probes["ray"]
    probes["ray"]["unpacked_by_actor"] = False
    assert probes["ray"] == probes["local"], "clock, hash seed, TZ, locale as in a local worker"


OUTSIDE_TOOL = """
def search(args, ctx):
    if args["query"].startswith("slow"):
        while True:  # interrupted by the per-call timer (SIGALRM in the worker's main thread)
            pass
    (ctx.workdir / "seen.txt").write_text(args["query"])
    return "result for " + args["query"]
"""


def test_model_outside_tools_in_actors_match_local(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """prepare, tool and finish of a rollout reach the actor holding its workdir; a tool timeout
    raised in the actor arrives as the worker's own exception, not as Ray's."""
    server = chat()
    inputs = [
        {"id": name, "prompt": f"{prefix} {name}", "answer": f"result for {prefix} {name}"}
        for prefix, name in (("say", "a"), ("say", "b"), ("say", "c"), ("slow", "d"))
    ]
    spec = env_builder.write(
        OUTSIDE_TOOL,
        inputs=inputs,
        tools=[SEARCH_TOOL],
        verifiers=[
            {"type": "exact_match", "expected_field": "answer"},
            {"type": "file_state", "path": "seen.txt", "expected": "say a"},
        ],
        # the slow tool loops until the timer; 3 s leaves the others room on a loaded 2-core CI
        limits={"max_turns": 3, "timeout_s": 3.0},
    )
    options = {"model": "openai:tiny", "base_url": server.base_url, "concurrency": 4}
    local, on_ray = both(spec, tmp_path, **options)
    assert on_ray.digest == local.digest
    assert on_ray.summary["counts"] == {"ok": 6, "timeout": 2}
    records = read_jsonl(on_ray.run_dir / "results.jsonl")
    for record in records:
        if record["input_id"] == "d":
            # a timed-out rollout is not graded, whoever stopped it
            assert record["error"] == "rollout exceeded limits.timeout_s (3 s)"
            assert record["verifiers"] == [] and record["passed"] is False
        else:
            assert record["answer"] == f"result for say {record['input_id']}"
            expected = record["input_id"] == "a"
            assert [v["passed"] for v in record["verifiers"]] == [True, expected]
    assert_each_rollout_once(on_ray.run_dir, ["a", "b", "c", "d"], 2)


def test_an_env_check_failing_in_an_actor_names_the_drivers_spec_line(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """`rlenv run` leaves the checks that import env code to the workers: an actor reports
    what they found as the user's error, placed in the driver's spec (not the actor's
    unpacked copy of it)."""
    spec = env_builder.write("raise ImportError('no such thing on this node')\n")
    with pytest.raises(UserError) as caught:
        run(spec, RunSettings(executor="ray", out=tmp_path / "out"))
    message = str(caught.value)
    assert message.startswith(f"{spec}:"), message
    assert "cannot import module" in message and "no such thing on this node" in message
    assert not (tmp_path / "out").exists()


def test_worker_start_failure_is_one_line(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """A world that cannot start in its actor (here its policy module fails on import) is one
    line naming the node, not a remote traceback."""
    spec = env_builder.write("raise ImportError('no such thing on this node')\n")
    config = WorkerConfig(
        spec_path=str(spec),
        work_root=str(tmp_path),
        model_uri=f"python:{env_builder.module}:policy",
    )
    with pytest.raises(RunFailed) as caught:
        RayExecutor(config, 1, None)
    message = str(caught.value)
    assert "frozen-world worker failed to start on " in message
    assert "no such thing on this node" in message
    assert "Traceback" not in message and "\n" not in message
    assert ray.is_initialized(), "an executor leaves a Ray instance it did not start running"


def test_actors_read_the_packed_env_not_the_drivers_paths(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Each actor builds its world from the env the driver packed, unpacked in its own work
    root: the driver's spec path is never read on the node."""
    spec = env_builder.write("def policy(messages, tools, ctx):\n    return 'a'\n")
    config = WorkerConfig(spec_path=str(spec), work_root=str(tmp_path / "work"))
    (tmp_path / "work").mkdir()
    executor = RayExecutor(config, 2, None)
    try:
        for state in executor.states:
            assert state["error"] is None
            unpacked = Path(state["spec"])
            assert unpacked != spec and unpacked.is_relative_to(state["work_root"])
            assert unpacked.read_bytes() == spec.read_bytes()
            module = unpacked.parent / f"{env_builder.module}.py"
            assert module.read_bytes() == (spec.parent / module.name).read_bytes()
    finally:
        executor.close()
    assert not any((tmp_path / "work").iterdir()), "actors remove their work roots"


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"pip install 'rlenv\[ray\]'"):
        import_ray()


def test_executor_and_address_are_checked(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write("def policy(messages, tools, ctx):\n    return 'a'\n")
    with pytest.raises(UserError, match="--executor must be local or ray"):
        run(spec, RunSettings(out=tmp_path / "x", executor="dask"))
    with pytest.raises(UserError, match="--address needs --executor ray"):
        run(spec, RunSettings(out=tmp_path / "y", address="auto"))


def test_cli_executor_ray_matches_local(tmp_path: Path) -> None:
    summaries = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        args = ("run", "envs/file_edit.yaml", "--limit", "3", "--out", str(out), "--json")
        done = cli(*args, "--executor", executor)
        assert done.returncode == 0, done.stderr
        summaries[executor] = json.loads(done.stdout)
    assert summaries["ray"]["digest"] == summaries["local"]["digest"]
    assert summaries["ray"]["world"]["network_guard"] == "python"
    wrong = cli("run", "envs/file_edit.yaml", "--address", "auto", "--out", str(tmp_path / "x"))
    assert wrong.returncode == 2 and "--address needs --executor ray" in wrong.stderr
    nowhere = tmp_path / "nowhere"
    nobody = cli(*args[:4], "--executor", "ray", "--address", "127.0.0.1:1", "--out", str(nowhere))
    assert nobody.returncode == 2 and "no Ray cluster answers there" in nobody.stderr
    assert not nowhere.exists(), "nothing written for a run that could not start"


def test_outside_tool_reads_the_frozen_clock_in_both_executors(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A tool called straight from a worker's entry point (model outside the world) reads the
    spec's instant: freezegun must not hand it the real clock because of the caller frames."""
    server = chat()
    spec = env_builder.write(
        PROBE.format(port=9),
        inputs=[{"id": "a", "prompt": "probe", "answer": "done"}],
        tools=[{"name": "probe", "function": "MOD:probe", "parameters": {"type": "object"}}],
        rollouts=1,
    )
    local, on_ray = both(spec, tmp_path, model="openai:tiny", base_url=server.base_url)
    probes = []
    for result in (local, on_ray):
        (record,) = read_jsonl(result.run_dir / "results.jsonl")
        probe = json.loads(record["messages"][2]["content"])
        assert probe["time"] == probe["monotonic"] == 1709294400.0
        probe.pop("unpacked_by_actor")
        probes.append(probe)
    assert probes[0] == probes[1]


OVERRUN_POLICY = """
import os, signal, time

def policy(messages, tools, ctx):
    word = messages[-1]["content"].split()[-1]
    if word == "deaf":  # the alarm is blocked: only the driver's kill stops it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    if word == "dies":
        os._exit(0)
    return word
"""


def test_an_overrunning_or_dying_worker_in_an_actor_is_the_local_record(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The actor's local executor stops a worker that overruns (the alarm blocked: only a
    kill stops it) or dies, and starts another; each record, its error text included, is the
    local run's, and the other rollouts go on."""
    words = ("a", "deaf", "dies", "b")
    inputs = [{"id": word, "prompt": f"say {word}", "answer": word} for word in words]
    spec = env_builder.write(OVERRUN_POLICY, inputs=inputs, rollouts=1, limits={"timeout_s": 1})
    local, on_ray = both(spec, tmp_path, concurrency=2)
    for result in (local, on_ray):
        assert result.summary["counts"] == {"ok": 2, "timeout": 1, "policy_error": 1}
    ray_records = {r["input_id"]: r for r in read_jsonl(on_ray.run_dir / "results.jsonl")}
    local_records = {r["input_id"]: r for r in read_jsonl(local.run_dir / "results.jsonl")}
    for word in words:
        assert ray_records[word]["digest"] == local_records[word]["digest"], word
        assert ray_records[word]["error"] == local_records[word]["error"], word
    assert ray_records["deaf"]["error"] == "rollout exceeded limits.timeout_s (1 s)"
    assert ray_records["a"]["passed"] is ray_records["b"]["passed"] is True
    assert ray_records["dies"]["error"] == "the worker process died in the policy (exit code 0)"


def test_a_dead_actor_is_replaced_on_its_node(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """An actor that dies (its node, the OOM killer; env code cannot reach it) costs the
    call's rollout its error status; a fresh actor takes over on the same node and work root,
    and the next rollout runs there."""
    spec = env_builder.write("def policy(messages, tools, ctx):\n    return 'a'\n", rollouts=1)
    (tmp_path / "work").mkdir()
    config = WorkerConfig(
        spec_path=str(spec),
        work_root=str(tmp_path / "work"),
        model_uri=f"python:{env_builder.module}:policy",
    )
    executor = RayExecutor(config, 1, None)

    async def two_rollouts() -> tuple[WorkerLost, RolloutRecord]:
        with pytest.raises(WorkerLost) as lost:
            await executor.run_rollout(RolloutTask(0, 0), 5.0)
        return lost.value, await executor.run_rollout(RolloutTask(0, 0), 5.0)

    try:
        before = executor.states[0]
        ray.kill(executor.actors[0], no_restart=True)
        lost, record = asyncio.run(two_rollouts())
        after = executor.states[0]
    finally:
        executor.close()
    assert (lost.status, lost.error) == ("policy_error", "the worker process died in the rollout")
    assert record["status"] == "ok" and record["passed"] is True
    assert after["node_id"] == before["node_id"] and after["work_root"] == before["work_root"]
    assert not any((tmp_path / "work").iterdir()), "the replacement removed the work root"
