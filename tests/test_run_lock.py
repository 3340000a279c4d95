"""One writer per run directory; --resume refuses changed settings; the fingerprint covers
helper modules the env imports indirectly."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from rlenv.env import load_environment
from tests.conftest import RLENV, EnvBuilder, cli

GATED_POLICY = """
import os
def policy(messages, tools, ctx):
    with open(os.environ["RLENV_TEST_GATE_STARTED"], "w") as started:  # blocks until the test reads
        started.write("in")
    with open(os.environ["RLENV_TEST_GATE_RELEASE"]) as release:  # blocks until the test writes
        release.read()
    return messages[-1]["content"].split()[-1]
"""


def _open_with_timeout(path: Path, mode: str, process: subprocess.Popen) -> object:
    """Open a FIFO (it blocks until the other end opens); fail the test if the run ends first."""
    box: list[object] = []
    opener = threading.Thread(target=lambda: box.append(open(path, mode)), daemon=True)  # noqa: SIM115
    opener.start()
    while opener.is_alive():
        opener.join(0.2)
        if opener.is_alive() and process.poll() is not None:
            # unblock the thread by opening the other end ourselves
            os.close(os.open(path, os.O_RDWR))
            opener.join()
            pytest.fail(f"the first run ended before reaching the policy: {process.returncode}")
    return box[0]


def test_second_writer_is_refused_while_the_first_holds_the_run(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(GATED_POLICY, rollouts=1)
    started, release = tmp_path / "started", tmp_path / "release"
    os.mkfifo(started)
    os.mkfifo(release)
    gates = {
        **os.environ,
        "RLENV_TEST_GATE_STARTED": str(started),
        "RLENV_TEST_GATE_RELEASE": str(release),
        "RLENV_WORLD_SHARED": str(tmp_path),  # the gates: a channel the test opens
    }
    out = tmp_path / "run"
    first = subprocess.Popen(
        [str(RLENV), "run", str(spec), "--out", str(out), "--json", "--limit", "1"],
        env=gates,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        reader = _open_with_timeout(started, "r", first)
        reader.read()  # type: ignore[attr-defined]
        reader.close()  # type: ignore[attr-defined]
        # the first run is inside its only rollout: it holds the directory
        before = sorted((p.name, p.read_bytes()) for p in out.iterdir() if p.is_file())
        for extra in ([], ["--resume"]):
            second = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", *extra)
            assert second.returncode == 2, second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and "another rlenv run" in lines[0], second.stderr
            assert "Traceback" not in second.stderr
            after = sorted((p.name, p.read_bytes()) for p in out.iterdir() if p.is_file())
            assert after == before, "the refused run touched the directory"
    finally:
        with open(release, "w") as writer:
            writer.write("go")
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert (out / "summary.json").is_file()
    # the lock is released with the run: a resume now works
    again = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", "--resume")
    assert again.returncode == 0, again.stderr


ECHO = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]

def other(messages, tools, ctx):
    return "nope"
"""


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (["--expensive-fraction", "0.5"], "expensive_fraction"),
        (["--defer-expensive"], "deferred_expensive"),
        (["--limit", "2"], "limit"),
        (["--rollouts", "2"], "rollouts_per_input"),
        (["--model", "python:MOD:other"], "model"),
    ],
)
def test_resume_refuses_a_changed_setting(
    env_builder: EnvBuilder, tmp_path: Path, change: list[str], field: str
) -> None:
    spec = env_builder.write(ECHO, rollouts=1)
    out = tmp_path / "run"
    base = ["run", str(spec), "--out", str(out), "--json", "--limit", "1"]
    first = cli(*base)
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    change = [part.replace("MOD", env_builder.module) for part in change]
    if "--limit" in change:
        base = base[:-2]
    resumed = cli(*base, "--resume", *change)
    assert resumed.returncode == 2, resumed.stderr
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], resumed.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_resume_refuses_an_edited_env(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(ECHO, rollouts=1)
    out = tmp_path / "run"
    assert cli("run", str(spec), "--out", str(out), "--json", "--limit", "1").returncode == 0
    module = env_builder.root / f"{env_builder.module}.py"
    module.write_text(module.read_text() + "\n# edited\n")
    resumed = cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", "--resume")
    assert resumed.returncode == 2
    assert "model" in resumed.stderr  # the policy's source is the model's identity (issue 18.8)


INDIRECT = """
import helper_mid
from pkg import sub
from pkg.deep import thing

def policy(messages, tools, ctx):
    return helper_mid.answer(messages) + sub.X + thing.Y

def tool(args, ctx):
    return policy([], [], ctx)
"""


def test_fingerprint_covers_indirectly_imported_helpers(env_builder: EnvBuilder) -> None:
    # the module is a tool's too, so its helpers are env code (a policy's alone are the model's)
    spec = env_builder.write(INDIRECT, rollouts=1, tools=[{"name": "t", "function": "MOD:tool"}])
    root = env_builder.root
    (root / "helper_mid.py").write_text("import helper_leaf\n\ndef answer(m):\n    return ''\n")
    (root / "helper_leaf.py").write_text("VALUE = 1\n")
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub.py").write_text("from . import rel\nX = ''\n")
    (root / "pkg" / "rel.py").write_text("R = 1\n")
    (root / "pkg" / "deep" / "__init__.py").write_text("")
    (root / "pkg" / "deep" / "thing.py").write_text("from ..rel import R\nY = ''\n")
    original = load_environment(spec, purpose="run").fingerprint
    assert load_environment(spec, purpose="run").fingerprint == original
    for helper in ("helper_leaf.py", "pkg/rel.py", "pkg/deep/thing.py", "pkg/__init__.py"):
        path = root / helper
        saved = path.read_text()
        path.write_text(saved + "\n# edited\n")
        assert load_environment(spec, purpose="run").fingerprint != original, helper
        path.write_text(saved)
        assert load_environment(spec, purpose="run").fingerprint == original, helper
