"""The system dependencies scripts/system-deps.sh promises are here and work: bubblewrap as the
verifier sandbox, libfaketime, chromium. Elsewhere these skip; under CI (CI=true) they fail, so a
missing sandbox cannot turn the suite's isolation tests into silent skips."""

from __future__ import annotations

from pathlib import Path

from rlenv.sandbox import faketime_library, probe_mechanism
from rlenv.world.netguard import netns_prefix
from tests.conftest import require, require_tool


def test_bubblewrap_is_the_sandbox() -> None:
    require_tool("bwrap")
    require(probe_mechanism() == "bwrap", "a working bubblewrap sandbox (bwrap is on PATH)")


def test_workers_get_a_network_namespace() -> None:
    require_tool("unshare")
    require(netns_prefix() != [], "a working `unshare --net` for the rollout workers")


def test_libfaketime_is_installed() -> None:
    require(faketime_library() is not None, "libfaketime")


def test_chromium_is_installed() -> None:
    require(Path("/usr/bin/chromium").exists(), "/usr/bin/chromium")


def test_make_demo_installs_what_record_needs() -> None:
    """`make demo` runs the script for libfaketime alone (what `rlenv record` needs for an env's
    services), before the demo's first rlenv command, and goes on when it cannot install it."""
    import subprocess

    from tests.conftest import ROOT

    require_tool("make")
    planned = subprocess.run(
        ["make", "-n", "-o", "venv", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    deps = next(i for i, line in enumerate(planned) if "scripts/system-deps.sh faketime" in line)
    assert "||" in planned[deps], "a machine where it cannot install still gets the demo"
    assert deps < next(i for i, line in enumerate(planned) if "rlenv validate" in line)
    require(faketime_library() is not None, "libfaketime")
    checked = subprocess.run(
        ["bash", "scripts/system-deps.sh", "faketime"], cwd=ROOT, capture_output=True, text=True
    )
    assert (
        checked.returncode == 0
        and checked.stdout.strip() == "system-deps: faketime already present"
    )
