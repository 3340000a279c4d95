"""No channel between rollouts (issue 26 item 2): what one rollout leaves in the kernel keyring,
SysV or POSIX IPC, an abstract socket or a shared scratch directory, no later rollout reads:
not in the same run, not in the next `rlenv run`, not in the next code-verifier sandbox.

The attacks are `tests/channels_catalog.py`; each runs for real (`rlenv run`, `run_sandboxed`).
"""

from __future__ import annotations

from pathlib import Path

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


def _crossed(crossings: list[Crossing], not_promised: set[str] = frozenset()) -> list[str]:
    return [
        f"{c.channel}: wrote {c.wrote!r}, read {c.read!r}"
        for c in crossings
        if not c.held and c.channel.split(" ")[0] not in not_promised
    ]


def test_no_channel_between_worker_rollouts(tmp_path: Path) -> None:
    crossings = world_crossings(tmp_path, RLENV, ROOT)
    assert len(crossings) == 2 * len(CHANNELS)
    # the tool ran (a catalog whose tool is never called holds every channel, vacuously)
    assert not [c for c in crossings if "unknown tool" in c.wrote + c.read], crossings
    assert [c.wrote for c in crossings if c.channel == "dev_shm"] == ["wrote"], crossings
    assert _crossed(crossings, WORLD_NOT_PROMISED) == []


@needs(MECHANISMS != ["missing"], "a namespace sandbox (bubblewrap or unshare)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_no_channel_between_sandboxes(tmp_path: Path, mechanism: str) -> None:
    crossings = sandbox_crossings(tmp_path, mechanism)
    assert len(crossings) == 2 * len(SANDBOX_CHANNELS)
    assert _crossed(crossings) == []
