"""No channel between rollouts (issue 26 item 2): what one rollout leaves in the kernel keyring,
SysV or POSIX IPC, an abstract socket, a scratch directory (/dev/shm, /tmp, /var/tmp, $HOME), a
host directory it may write (the env's own, site-packages, /etc when it runs as root) or
its worker's python state (a module global, os.environ, a patched builtin, sys.modules, an open
file), no later rollout reads: not in the same run, not in the next `rlenv run`, not in the next
code-verifier sandbox.

The attacks are `tests/channels_catalog.py`; each runs for real (`rlenv run`, `run_sandboxed`),
once per module, and each channel in each order is a case of its own (`bench/attacks.py` counts
them).
"""

from __future__ import annotations

import pytest

from rlenv.sandbox import _mechanism_works as mechanism_works
from tests.channels_catalog import (
    CHANNELS,
    SANDBOX_CHANNELS,
    WORLD_NOT_PROMISED,
    Crossing,
    sandbox_crossings,
    world_crossings,
)
from tests.conftest import RLENV, ROOT, needs

MECHANISMS = [m for m in ("bwrap", "unshare") if mechanism_works(m)] or ["missing"]
ORDERS = ("", " (next run)")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Crossing]:
    crossings = world_crossings(tmp_path_factory.mktemp("channels"), RLENV, ROOT)
    return {crossing.channel: crossing for crossing in crossings}


def _world_case(channel: str, order: str) -> object:
    if channel in WORLD_NOT_PROMISED and not order:
        return pytest.param(channel, order, marks=pytest.mark.xfail(reason="not promised"))
    return pytest.param(channel, order)


def test_the_channel_tools_ran(world: dict[str, Crossing]) -> None:
    """Not vacuous: a catalog whose tool is never called holds every channel."""
    assert len(world) == 2 * len(CHANNELS)
    assert not [c for c in world.values() if "unknown tool" in c.wrote + c.read], world
    assert world["dev_shm"].wrote == "wrote" and world["tmp"].wrote == "wrote", world
    assert world["py_global"].wrote == "wrote" and world["home"].wrote == "wrote", world
    # the semaphore was made in the worker (not vacuous): its mapping was written in the child
    assert world["kept_semaphore_map"].wrote == "wrote", world
    assert "made in this process" not in world["kept_semaphore"].wrote, world


@pytest.mark.parametrize(
    ("channel", "order"), [_world_case(c, o) for c in CHANNELS for o in ORDERS]
)
def test_no_channel_between_worker_rollouts(
    world: dict[str, Crossing], channel: str, order: str
) -> None:
    crossing = world[channel + order]
    assert crossing.held, f"{crossing.channel}: wrote {crossing.wrote!r}, read {crossing.read!r}"


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Crossing]]:
    found = {}
    for mechanism in MECHANISMS:
        if mechanism != "missing":
            crossings = sandbox_crossings(tmp_path_factory.mktemp(mechanism), mechanism)
            found[mechanism] = {crossing.channel: crossing for crossing in crossings}
    return found


@needs(MECHANISMS != ["missing"], "a namespace sandbox (bubblewrap or unshare)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("channel", SANDBOX_CHANNELS)
@pytest.mark.parametrize("order", ("", " (again)"))
def test_no_channel_between_sandboxes(
    sandboxes: dict[str, dict[str, Crossing]], mechanism: str, channel: str, order: str
) -> None:
    crossings = sandboxes[mechanism]
    assert len(crossings) == 2 * len(SANDBOX_CHANNELS)
    crossing = crossings[channel + order]
    assert crossing.held, f"{crossing.channel}: wrote {crossing.wrote!r}, read {crossing.read!r}"
