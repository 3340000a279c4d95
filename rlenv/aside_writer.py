"""The process that writes a run's results.jsonl, tallies it and builds its summary when the
orchestrator hands its records over (rlenv.results_aside starts it: ``python -P -c``). It
imports what writing and summarising need, and no event loop, HTTP or provider code: a fresh
interpreter of ~10 MB of PSS (asyncio and ssl alone were ~4 MB more)."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from rlenv.errors import RunFailed, portable

if TYPE_CHECKING:
    from rlenv.summary import SummaryPlan


class WriterFailed(RunFailed):
    """The results writer's process ended without an answer (killed: out of memory, a signal):
    the run ends (exit code 1, one line), the lines written before are kept for --resume."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what}; the rollouts written are kept: continue with --resume")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what,))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve() -> None:  # pragma: no cover - runs in the writer's process (tests check its work)
    """The writer (``python -P -c``; argv: the records pipe, the answer pipe): read the plan,
    append each record handed over, then build the summary if asked; answer
    ``("summary", dict)``, ``("closed", None)`` or ``("error", exception)``, and exit."""
    from rlenv.results import ResultsWriter, WrittenLine
    from rlenv.scheduling import behind_the_orchestrator

    records, answer = int(sys.argv[1]), int(sys.argv[2])
    behind_the_orchestrator()  # woken by each batch of records handed over
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's to handle
    result: tuple[str, Any] = ("closed", None)
    try:
        with open(records, "rb", buffering=1 << 16, closefd=True) as stream:
            frames = _frames(stream)
            plan: SummaryPlan = pickle.loads(next(frames))
            totals = plan.totals()
            writer = ResultsWriter(plan.results, totals.add_line)
            asked = False
            for body in frames:
                if not body:
                    asked = True
                    break
                item = pickle.loads(body)
                if isinstance(item, WrittenLine):
                    writer.write_encoded(item)
                else:
                    writer.write(item)
        writer.close()  # (a failure above: the orchestrator's next record meets a closed pipe)
        if asked:
            result = ("summary", plan.build(totals))
    except BaseException as exc:  # noqa: BLE001 - every failure is the orchestrator's to raise
        result = ("error", exc)
    if result[0] == "error":  # one that cannot be rebuilt is sent as its message
        result = ("error", portable(result[1], WriterFailed))
    with contextlib.suppress(OSError):
        write_all(answer, pickle.dumps(result, pickle.HIGHEST_PROTOCOL))
    os._exit(0)


def _frames(stream: IO[bytes]) -> Iterator[bytes]:
    """The frames on the records pipe (length, bytes), until it closes or a frame is cut."""
    while True:
        head = stream.read(4)
        if len(head) < 4:
            return  # the orchestrator closed (or died): what it handed over is written
        size = int.from_bytes(head, "little")
        body = stream.read(size) if size else b""
        if len(body) < size:
            return
        yield body
