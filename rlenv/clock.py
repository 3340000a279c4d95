"""The one wall clock of the orchestrator (never used inside the frozen world)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def wall_now() -> datetime:
    return datetime.now(UTC)


def monotonic() -> float:
    return time.perf_counter()
