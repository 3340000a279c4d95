"""No channel between rollouts on Ray (issue 26 item 2): the channel catalog of
`tests/test_isolation_channels.py` (`tests/channels_catalog.py`), run through
`rlenv run --executor ray --workers 1 --concurrency 1`, so one actor serves every rollout of a
run, and then the next run.

An actor used to be a frozen world itself, one long-lived Ray worker process: a module global,
``os.environ``, a file in /tmp or /dev/shm, a key in the kernel keyring left by one rollout were
there for the next. Now each actor hosts a local executor (`rlenv.executors.ray`), whose
isolated worker runs each rollout in a fork of its own, as locally.

One local Ray instance serves the module; `rlenv run` joins it with ``--address``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

ray = pytest.importorskip("ray")

from tests.channels_catalog import CHANNELS, Crossing, world_crossings  # noqa: E402
from tests.conftest import RLENV, ROOT, local_ray  # noqa: E402

ORDERS = ("", " (next run)")


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray instance for the module (its address for `rlenv run --address`)."""
    with local_ray(num_cpus=1, store_mb=128) as context:
        yield context.address_info["gcs_address"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, ray_address: str) -> dict[str, Crossing]:
    extra = ("--executor", "ray", "--workers", "1", "--address", ray_address)
    crossings = world_crossings(tmp_path_factory.mktemp("ray-channels"), RLENV, ROOT, extra)
    return {crossing.channel: crossing for crossing in crossings}


def test_the_channel_tools_ran_in_an_actor(world: dict[str, Crossing]) -> None:
    """Not vacuous: a catalog whose tool is never called holds every channel."""
    assert len(world) == 2 * len(CHANNELS)
    assert not [c for c in world.values() if "unknown tool" in c.wrote + c.read], world
    assert world["dev_shm"].wrote == "wrote" and world["tmp"].wrote == "wrote", world
    assert world["py_global"].wrote == "wrote" and world["home"].wrote == "wrote", world


@pytest.mark.parametrize(("channel", "order"), [(c, o) for c in CHANNELS for o in ORDERS])
def test_no_channel_between_actor_rollouts(
    world: dict[str, Crossing], channel: str, order: str
) -> None:
    crossing = world[channel + order]
    assert crossing.held, f"{crossing.channel}: wrote {crossing.wrote!r}, read {crossing.read!r}"
