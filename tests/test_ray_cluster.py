"""`--executor ray --address` against a real two-node Ray cluster that shares no env files.

Two `ray start` processes on this host, each with its own temp dir, ports and 1 CPU, form one
cluster (`ray start --head` + `ray start --address`: Ray 2.x runs several raylets on one host
when their ports and temp dirs differ). The nodes start in an empty directory with only the
tree under test on PYTHONPATH (its rlenv, not the venv's editable install of another checkout),
so nothing of the env is importable there; the env is copied to a fresh directory
and `rlenv run` starts from yet another. Two rollouts in flight need two actors of 1 CPU each:
one lands on each node. The digest must equal the local executor's on the same copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.conftest import ROOT, cli  # noqa: E402

RAY_CLI = "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def node_ports() -> list[str]:
    """Every port a node listens on, chosen free, so two nodes (and other Ray instances on
    this machine) never collide on a default."""
    options = [
        "--node-manager-port",
        "--object-manager-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--metrics-export-port",
        "--runtime-env-agent-port",
    ]
    return [part for option in options for part in (option, str(free_port()))]


def cluster_environment() -> dict[str, str]:
    # no token: this cluster lives for one test on loopback; the driver must match it.
    # PYTHONPATH: only the tree under test (its rlenv, never another checkout's), nothing
    # of the env (the envs are packages under envs/, not importable from the tree's root)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class TwoNodeCluster:
    """`ray start --head` and `ray start --address` in their own sessions; stop() kills both
    process groups (every daemon `ray start` left behind) and anything else still running
    from their temp dirs, never another Ray on the machine (`ray stop` would)."""

    def __init__(self) -> None:
        # short paths: Ray's unix sockets live under the temp dir (108-byte limit)
        self.root = Path(tempfile.mkdtemp(prefix="rlc", dir="/tmp"))
        self.groups: list[int] = []
        self.address = ""

    def _start(self, name: str, *args: str) -> None:
        temp = self.root / name
        temp.mkdir()
        command = [sys.executable, "-c", RAY_CLI, "start", "--temp-dir", str(temp), *args]
        command += ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--num-gpus", "0"]
        command += ["--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats"]
        command += node_ports()
        empty = self.root / "cwd"
        empty.mkdir(exist_ok=True)
        started = subprocess.Popen(
            command,
            cwd=empty,
            env=cluster_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.groups.append(started.pid)
        output, _ = started.communicate(timeout=120)
        if started.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{output[-3000:]}")

    def start(self) -> str:
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        head = ["--head", "--port", str(port), "--include-dashboard", "false"]
        head += ["--dashboard-port", str(free_port())]
        self._start("head", *head)
        self._start("worker", "--address", self.address)
        return self.address

    def _leftovers(self) -> list[int]:
        mine = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.root).encode() in command:
                mine.append(int(entry.name))
        return mine

    def stop(self) -> None:
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self._leftovers():
            time.sleep(0.2)
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        for pid in self._leftovers():  # a daemon that left its group, started from our dirs
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    nodes = TwoNodeCluster()
    try:
        yield nodes.start()
    finally:
        nodes.stop()


# The bundled search env's baseline, leaving a note (in a directory the test opens to the world
# with RLENV_WORLD_SHARED, not in any record) of the actor whose unpacked env it was imported
# from: its root, ray-actor-* (the policy runs in the worker the actor hosts, not in Ray).
NOTED = """
import secrets
from pathlib import Path

from search_env.policies import baseline

NOTES = Path({notes!r})

def policy(messages, tools, ctx):
    parts = Path(__file__).parts
    actor = next((part for part in parts if part.startswith("ray-actor-")), "local")
    (NOTES / f"{{actor}}-{{secrets.token_hex(4)}}").write_text(__file__)
    return baseline(messages, tools, ctx)
"""


def test_two_node_cluster_without_shared_files(cluster: str, tmp_path: Path) -> None:
    """The search env (cassette, helper package, python policy) copied to a fresh directory,
    run from another: the nodes get everything from the driver, both run rollouts, and the
    digest is the local executor's."""
    copy, notes, elsewhere = tmp_path / "copy", tmp_path / "notes", tmp_path / "cwd"
    shutil.copytree(ROOT / "envs", copy / "envs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "fixtures" / "search", copy / "fixtures" / "search")
    (copy / "envs" / "noted_policy.py").write_text(NOTED.format(notes=str(notes)))
    notes.mkdir()
    elsewhere.mkdir()  # neither the project nor the env: the driver's working directory
    summaries = {}
    for executor in ("local", "ray"):
        args = ["run", str(copy / "envs" / "search.yaml"), "--limit", "4", "--json"]
        args += ["--model", "python:noted_policy:policy", "--out", str(tmp_path / executor)]
        if executor == "ray":
            args += ["--executor", "ray", "--address", cluster, "--concurrency", "2"]
        shared = {"RAY_AUTH_MODE": "disabled", "RLENV_WORLD_SHARED": str(notes)}
        done = cli(*args, cwd=elsewhere, env=shared, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        summaries[executor] = json.loads(done.stdout)
    # another process (a Ray node) may score a reward-model float an ulp apart: the outcomes
    # are identical and the scores within the stated tolerance (issue 26 item 6)
    assert summaries["ray"]["outcome_digest"] == summaries["local"]["outcome_digest"]
    against = cli("check", str(tmp_path / "ray"), "--against", str(tmp_path / "local"))
    assert against.returncode == 0 and "same outcomes" in against.stdout, against.stdout
    assert summaries["ray"]["counts"] == summaries["local"]["counts"] == {"ok": 8}
    assert summaries["ray"]["fixtures"] == summaries["local"]["fixtures"]
    assert set(summaries["ray"]["fixtures"]) == {"hit"}, "tool HTTP replayed inside the actors"
    assert summaries["ray"]["world"]["network_guard"] == "python"
    on_ray: dict[str, set[str]] = {}
    for note in notes.iterdir():
        actor = note.name.rsplit("-", 1)[0]
        if actor != "local":
            on_ray.setdefault(actor, set()).add(note.read_text())
    # two actors of one CPU each on nodes of one CPU each: one actor per node
    assert len(on_ray) == 2, f"rollouts ran in {len(on_ray)} actor(s), expected two"
    for modules in on_ray.values():
        for module in modules:
            # imported from the env its actor unpacked, not from the driver's copy
            assert not module.startswith(str(copy)) and "/ray-actor-" in module, module
