"""`rlenv validate` and `rlenv run` import only what the spec needs, in every process they start.

Each `rlenv` subprocess pays for its imports before any work (the test suite runs hundreds of
them; issue 30 item 2): a python-policy env without tools, a reward model or a judge needs no
NumPy (the run's summary aside), torch, transformers, vcrpy, aiohttp, jinja2 nor rich. The
orchestrator's modules are read at exit; those of the checking child and of the frozen-world
workers from `-X importtime` (PYTHONPROFILEIMPORTTIME, passed to them through the world's
variables), so a heavy import that sneaks back into any of them fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EnvBuilder

PROBE = """
import atexit, json, sys
import rlenv.world.environment as environment

real = environment.world_environment


def traced(environ=None):
    return {**real(environ), "PYTHONPROFILEIMPORTTIME": "1"}


environment.world_environment = traced
if sys.argv[1] == "run":
    import rlenv.executors.local as local

    local.world_environment = traced


@atexit.register
def dump():
    loaded = sorted({name.split(".")[0] for name in sys.modules})
    print("ORCHESTRATOR " + json.dumps(loaded), file=sys.stderr)


sys.argv = ["rlenv", *sys.argv[1:]]
from rlenv.cli import main

main()
"""

POLICY = """
def policy(messages, tools, ctx):
    return "a"
"""

HTTPX_POLICY = """
import httpx  # env code's own import: httpx loads its command-line client when it can


def policy(messages, tools, ctx):
    return "a"
"""

HEAVY = ("torch", "transformers", "vcr", "aiohttp", "jinja2", "rich", "pygments", "scipy")


def _imports(arguments: list[str], cwd: Path, tmp_path: Path) -> tuple[set[str], set[str]]:
    """(top-level modules of the orchestrator, of every child it started) for `rlenv ARGS`."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    result = subprocess.run(
        [sys.executable, str(probe), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    orchestrator: set[str] = set()
    children: set[str] = set()
    for line in result.stderr.splitlines():
        if line.startswith("ORCHESTRATOR "):
            orchestrator = set(json.loads(line.split(" ", 1)[1]))
        elif line.startswith("import time:") and "cumulative" not in line:
            children.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert orchestrator, result.stderr[-3000:]
    return orchestrator, children


@pytest.fixture(scope="module")
def python_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return EnvBuilder(tmp_path_factory.mktemp("light-env")).write(POLICY)


def test_validate_a_python_env_imports_nothing_heavy(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The env module imports httpx, which loads its command-line client (rich, pygments,
    click: ~0.35 s of CPU) when it can: the checking child, like a worker, leaves it out."""
    spec = EnvBuilder(tmp_path_factory.mktemp("httpx-env")).write(HTTPX_POLICY)
    orchestrator, child = _imports(["validate", str(spec)], spec.parent, tmp_path)
    assert "rlenv" in child and "httpx" in child, "the checking child was not traced"
    for heavy in ("numpy", *HEAVY):
        assert heavy not in orchestrator, f"`rlenv validate` imported {heavy}"
        assert heavy not in child, f"the checking child of `rlenv validate` imported {heavy}"
    assert "click" not in child, "the checking child imported httpx's command-line client"


def test_run_a_python_env_imports_nothing_heavy(python_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    arguments = ["run", str(python_env), "--limit", "1", "--rollouts", "1", "--out", str(out)]
    orchestrator, workers = _imports(arguments, python_env.parent, tmp_path)
    assert "rlenv" in workers, "no worker was traced"
    # unittest: the code verifiers' module, which the run once imported for one constant
    for heavy in ("unittest", *HEAVY):
        assert heavy not in orchestrator, f"`rlenv run` imported {heavy}"
    for heavy in ("numpy", "httpx", *HEAVY):  # httpx: only where tool replay patches it
        assert heavy not in workers, f"a worker of `rlenv run` imported {heavy}"


HELP_PROBE = """
import atexit, json, sys


@atexit.register
def dump():
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)


sys.argv = ["rlenv", "--help"]
from rlenv.cli import main

main()
"""


def test_help_imports_typer_and_the_command_modules_only(tmp_path: Path) -> None:
    """`rlenv --help` (target 0.35 s, bench/startup.py): the command modules import their
    library modules inside the commands, so no spec model, YAML or NumPy is loaded."""
    probe = tmp_path / "help.py"
    probe.write_text(HELP_PROBE)
    result = subprocess.run(
        [sys.executable, str(probe)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stderr.strip().splitlines()[-1])
    tops = {name.split(".")[0] for name in loaded}
    for heavy in ("pydantic", "yaml", "numpy", "httpx", *HEAVY):
        assert heavy not in tops, f"`rlenv --help` imported {heavy}"
    library = [
        name
        for name in loaded
        if name.startswith("rlenv.")
        and not name.startswith("rlenv.commands")
        and name not in ("rlenv.cli", "rlenv.version")
    ]
    assert library == [], f"`rlenv --help` imported library modules: {library}"
