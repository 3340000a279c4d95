"""results.jsonl written, and the summary tallied and built, by a process of its own
(:class:`ResultsAside`), so a run whose rollouts call a model over the network keeps its one
event loop for the calls.

At 256 rollouts in flight on a model 100 ms away, the orchestrator's single core is what limits
a run, and a third of its time went to each record's line (`encode_record`: the digests from
canonical JSON) and to tallying it for the summary. Here the orchestrator hands each record to
the writer as a pickle down a pipe (~5 us; one pipe write per batch); the writer encodes it,
appends it, tallies it, and at the end builds the summary from the run's
:class:`rlenv.summary.SummaryPlan` and sends it back. The lines, the digests and the summary
are the very ones the in-process writer makes: the same code runs, in another process
(tests/test_results_aside.py).

The writer (rlenv.aside_writer) is a fresh interpreter (`rlenv.fresh_python`: ``python -P
-c``, this one's ``sys.path``), not a fork: a fork shares the orchestrator's pages only until
either writes them, and the orchestrator rewrites its heap all run long (a forked writer cost
~18 MB of the tree's PSS at 20k rollouts, and a page fault in the orchestrator for each page
copied; a fresh one holds what it imports and its tally).

What a failure does is what it did in process: an error writing a line (a full disk) ends the
run at the next record handed over, or at the end, with that error, the lines before it whole;
a summary that refuses the records (TamperedRun) is raised in the orchestrator; if the
orchestrator dies, the writer still appends every record it was handed, then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pickle
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlenv.aside_writer import WriterFailed, write_all
from rlenv.fresh_python import start_python
from rlenv.results import encode_record

if TYPE_CHECKING:
    from rlenv.summary import SummaryPlan

RESULTS_WRITER_VARIABLE = "RLENV_RESULTS_WRITER"
"""``inline``: write results.jsonl in the orchestrator's own process, as every run did before."""

_SUMMARIZE = (0).to_bytes(4, "little")  # a frame of no length: the records are all sent
_PIPE_BYTES = 1 << 20  # ~1 500 records of slack before a slow writer holds the event loop up
_F_SETPIPE_SZ = 1031
_BATCH_BYTES = 1 << 16
_FLUSH_S = 0.02
"""Records go to the writer in one pipe write per 64 KiB or per 20 ms (each write wakes it: one
a record was ~10 us of the orchestrator's time at 2 000 records/s): a record handed over is in
results.jsonl within ~20 ms, and all of them by :meth:`ResultsAside.finish` or `close`."""

_CHILD = "from rlenv.aside_writer import serve; serve()"  # not this module: no asyncio there


def writes_aside(provider: object, executor: str, world_runs_code: bool) -> bool:
    """Whether a run's results are written by a process of their own: when the orchestrator's
    one core is what limits the run, that is when its rollouts cost the workers little. A
    model called over the network from here (a provider that says it is ``remote``), or a
    policy of rlenv's own in the world (``env_code`` False: ``replay:``) where no tool or
    simulated user runs env code (`world_runs_code` False). Not a python policy or a tool
    (a process per rollout keeps both cores busy: the writer's memory would buy nothing),
    nor a local model (its forward passes dwarf the writing); the local executor only, and
    not with RLENV_RESULTS_WRITER=inline."""
    if os.environ.get(RESULTS_WRITER_VARIABLE, "").strip().lower() == "inline":
        return False
    if not sys.executable or executor != "local":  # (an embedded interpreter: no python)
        return False
    if getattr(provider, "remote", False):
        return True
    in_world = getattr(provider, "in_world", False)
    return bool(in_world) and getattr(provider, "env_code", True) is False and not world_runs_code


def start_aside(plan: SummaryPlan, hold: int | None = None) -> ResultsAside | None:
    """A writer of its own for `plan`'s run, or None when none can be had (no process left
    to start, a plan that cannot be sent): the run then writes in its own process."""
    try:
        return ResultsAside(plan, hold)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return None


class ResultsAside:
    """A results writer in a process of its own: :meth:`write` as
    :class:`rlenv.results.ResultsWriter`'s, :meth:`finish` for the summary, :meth:`close` to
    stop without one."""

    def __init__(self, plan: SummaryPlan, hold: int | None = None) -> None:
        """Start the writer for `plan`'s run (its results.jsonl, its summary). `hold`: a
        descriptor the writer keeps open until it exits (the run directory's lock: a run
        resumed at once after this one's death waits for the writer's last line)."""
        first = pickle.dumps(plan, pickle.HIGHEST_PROTOCOL)  # before any process or pipe
        records_read, self._records = os.pipe()
        answer, answer_write = os.pipe()
        with contextlib.suppress(OSError):  # a bigger pipe where the system allows it
            fcntl.fcntl(self._records, _F_SETPIPE_SZ, _PIPE_BYTES)
        try:
            self.process = start_python(
                _CHILD,
                str(records_read),
                str(answer_write),
                pass_fds=(records_read, answer_write, *([] if hold is None else [hold])),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # `run --json` prints the summary there
            )
        except OSError:  # no process to be had: the caller writes in its own
            for fd in (self._records, answer):
                os.close(fd)
            raise
        finally:
            os.close(records_read)
            os.close(answer_write)
        self.pid = self.process.pid
        self._answer = answer
        self._open = True
        self._pending: list[bytes] = []  # frames waiting to be sent in one write
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._broken = False
        self._result: tuple[str, Any] | None = None
        self._hand(first)
        self._flush()

    def write(self, record: Mapping[str, Any]) -> None:
        """Hand one record to the writer (an error the writer met ends the run here)."""
        try:
            body = pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
        except Exception:  # not a pickle: its line, as the writer would have made it
            body = pickle.dumps(encode_record(record), pickle.HIGHEST_PROTOCOL)
        self._hand(body)
        if self._broken or self._bytes >= _BATCH_BYTES:
            self._flush()
        elif not self._timer:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # called from no event loop: nothing would flush it later
                self._flush()
            else:
                self._timer = loop.call_later(_FLUSH_S, self._flush_later)

    def finish(self) -> dict[str, Any]:
        """Every record written and the file synced; the summary the writer built."""
        self._pending.append(_SUMMARIZE)
        self._flush()  # a writer that failed raises its own error here
        self._end()
        self._raise()
        kind, value = self._result or ("", None)
        if kind != "summary" or not isinstance(value, dict):
            raise WriterFailed("the results writer ended without a summary")
        return value

    def close(self) -> None:
        """Every record handed over written and the file synced (no summary)."""
        self._end()
        self._raise()

    def _hand(self, body: bytes) -> None:
        self._pending.append(len(body).to_bytes(4, "little"))
        self._pending.append(body)
        self._bytes += 4 + len(body)

    def _take(self) -> bytes:
        """What is pending, in one piece (and no timer left to send it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending, self._bytes = self._pending, [], 0
        return b"".join(pending)

    def _flush(self) -> None:
        """Send what is pending (an error the writer met is raised here)."""
        data = self._take()
        try:
            if self._broken:
                raise BrokenPipeError
            write_all(self._records, data)
        except BrokenPipeError:
            self._end()
            self._raise()
            raise WriterFailed("the results writer stopped reading") from None

    def _flush_later(self) -> None:
        """The event loop's timer: what waited is sent; a failure waits for the next write."""
        self._timer = None
        try:
            write_all(self._records, self._take())
        except BrokenPipeError:
            self._broken = True

    def _end(self) -> None:
        if not self._open:
            return
        self._open = False
        pending = self._take()
        if pending and not self._broken:  # what was handed over is written
            with contextlib.suppress(BrokenPipeError):
                write_all(self._records, pending)
        os.close(self._records)
        with open(self._answer, "rb", closefd=True) as answer:
            data = answer.read()
        status = self.process.wait()
        if not data:
            how = f"signal {-status}" if status < 0 else f"exit status {status}"
            self._result = ("error", WriterFailed(f"the results writer (pid {self.pid}): {how}"))
            return
        self._result = pickle.loads(data)

    def _raise(self) -> None:
        if self._result is not None and self._result[0] == "error":
            error, self._result = self._result[1], ("raised", None)
            raise error
