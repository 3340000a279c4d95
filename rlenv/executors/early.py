"""Workers started as `rlenv run` begins, before the env is loaded.

A local worker takes ~0.3 s of CPU to start (its interpreter, the world's code), and the
orchestrator waited for it after loading the env, its inputs and the policy: half of what a
small run's start took. Started early, the workers import while the orchestrator loads, and
are given their config when it is made (`LocalExecutor(..., early=)`), which takes them over
only if they were started exactly as the run's would be (the same command and variables:
the spec's instant, read here ahead of its full load, is one of them); else they are stopped
and the run starts its own, as before.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlenv.executors.local import LocalExecutor


def spec_instant(spec_path: str | Path) -> str | None:
    """The spec's frozen instant (ISO 8601, as the loaded spec gives it), read ahead of its
    full load; None where it cannot be told so (a variant: its base may give it; no valid
    zoned time: the load says what is wrong)."""
    from pydantic import TypeAdapter, ValidationError

    from rlenv import user_yaml as user
    from rlenv.errors import UserError
    from rlenv.spec_compose import EXTENDS

    path = Path(spec_path)
    try:
        _, raw = user.read_yaml(path, user.read_user_text(path, "spec file"))
    except (UserError, OSError):
        return None
    if not isinstance(raw, dict) or EXTENDS in raw or "time" not in raw:
        return None
    try:
        instant = TypeAdapter(datetime).validate_python(raw["time"])
    except ValidationError:
        return None
    return None if instant.tzinfo is None else instant.isoformat()


@contextlib.contextmanager
def early_workers(
    spec_path: str | Path, workers: int, work_parent: str | None
) -> Iterator[LocalExecutor | None]:
    """`workers` local workers started now for the spec at `spec_path` (None when its instant
    cannot be read ahead); whatever the run did not take over is stopped on the way out."""
    instant = spec_instant(spec_path) if workers > 0 else None  # no spec read for none
    if instant is None:
        yield None
        return
    from rlenv.executors.local import LocalExecutor

    # the work root's parent is all the command depends on (a private /dev/shm or not)
    root = str(Path(work_parent or tempfile.gettempdir()) / "rlenv-work-early")
    early = LocalExecutor.early(instant, root, workers)
    try:
        yield early
    finally:
        early.let_go()


def early_pool_size(settings: Any, default: int) -> int:
    """How many workers a run of `settings` starts at most (`make_executor`'s cap), before its
    inputs are known: 0 when it should start none early (Ray, recording, --resume, whose
    remaining rollouts may be fewer than its workers, or none)."""
    if settings.executor != "local" or settings.record_dir is not None or settings.resume:
        return 0
    pool = default if settings.workers is None else settings.workers  # default: capped
    return pool if settings.limit is None else min(pool, settings.limit)
