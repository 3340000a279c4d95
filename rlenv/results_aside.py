"""results.jsonl written, and the summary tallied and built, by a process forked for it
(:class:`ResultsAside`), so a run whose rollouts call a model outside the world keeps its one
event loop for the calls.

At 256 rollouts in flight on a model 100 ms away, the orchestrator's single core is what limits
a run, and a third of its time went to each record's line (`encode_record`: the digests from
canonical JSON) and to tallying it for the summary. Here the orchestrator hands each record to
the child as a pickle down a pipe (~5 us); the child encodes it, appends it, tallies it, and at
the end builds the summary (the caller's `summarize`, run in the child with the totals it
tallied) and sends it back. The lines, the digests and the summary are the very ones the
in-process writer makes: the same code runs, in another process
(tests/test_results_aside.py).

What a failure does is what it did in process: an error writing a line (a full disk) ends the
run at the next record with that error, the lines before it whole; a summary that refuses the
records (TamperedRun) is raised in the orchestrator; if the orchestrator dies, the child still
appends every record it was handed and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import pickle
import signal
from collections.abc import Callable, Mapping
from typing import Any

from rlenv.results import ResultsWriter, WrittenLine, encode_record

RESULTS_WRITER_VARIABLE = "RLENV_RESULTS_WRITER"
"""``inline``: write results.jsonl in the orchestrator's own process, as every run did before."""

_SUMMARIZE = (0).to_bytes(4, "little")  # a frame of no length: the records are all sent
_PIPE_BYTES = 1 << 20  # ~2 000 records of slack before a slow child holds the event loop up
_F_SETPIPE_SZ = 1031
_BATCH_BYTES = 1 << 16
_FLUSH_S = 0.02
"""Records go to the child in one write per 64 KiB or per 20 ms (each write wakes it: one a
record was ~10 us of the orchestrator's time at 2 000 records/s): a record handed over is in
results.jsonl within ~20 ms, and all of them by :meth:`finish` or :meth:`close`."""


def writes_aside(provider: object, executor: str) -> bool:
    """Whether a run's results are written by a child process: its policy is a model called
    over the network from the orchestrator (a provider that says it is ``remote``: not an
    in-world one, whose workers keep the other core busy, nor a local model, whose forward
    passes dwarf the writing and whose process, a trainer's, is no process to fork), run
    locally, on a system with fork, and RLENV_RESULTS_WRITER is not ``inline``."""
    if os.environ.get(RESULTS_WRITER_VARIABLE, "").strip().lower() == "inline":
        return False
    return bool(getattr(provider, "remote", False)) and executor == "local" and hasattr(os, "fork")


class WriterFailed(RuntimeError):
    """The results writer's process ended without an answer (killed: out of memory, a signal)."""


class ResultsAside:
    """A :class:`rlenv.results.ResultsWriter` served by a forked child: :meth:`write` as the
    writer's, :meth:`finish` for the summary, :meth:`close` to stop without one."""

    def __init__(self, writer: ResultsWriter, summarize: Callable[[], dict[str, Any]]) -> None:
        """Fork now (before the run starts threads or workers of its own): the child has
        `writer` (its file, its `on_line` tally) and `summarize` as they are here."""
        records_read, self._records = os.pipe()
        answer, answer_write = os.pipe()
        with contextlib.suppress(OSError):  # a bigger pipe where the system allows it
            fcntl.fcntl(self._records, _F_SETPIPE_SZ, _PIPE_BYTES)
        gc.freeze()  # neither process's collector rewrites the other's pages: they stay shared
        self._frozen = True
        try:
            self.pid = os.fork()
        except OSError:  # no memory or processes left for it: the caller writes in process
            gc.unfreeze()
            for fd in (records_read, self._records, answer, answer_write):
                os.close(fd)
            raise
        if self.pid == 0:  # pragma: no cover - the child (its work is checked by what it wrote)
            os.close(self._records)
            os.close(answer)
            _serve(writer, summarize, records_read, answer_write)
        os.close(records_read)
        os.close(answer_write)
        writer.handle.close()  # the child's copy is the one that writes (and fsyncs)
        self._answer = answer
        self._open = True
        self._pending: list[bytes] = []  # frames waiting to be sent in one write
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._broken = False
        self._result: tuple[str, Any] | None = None

    def write(self, record: Mapping[str, Any]) -> None:
        """Hand one record to the child (an error the child met ends the run here)."""
        try:
            body = pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
        except Exception:  # not a pickle: its line, as the writer would have made it
            body = pickle.dumps(encode_record(record), pickle.HIGHEST_PROTOCOL)
        self._pending.append(len(body).to_bytes(4, "little"))
        self._pending.append(body)
        self._bytes += 4 + len(body)
        if self._broken or self._bytes >= _BATCH_BYTES:
            self._flush()
        elif not self._timer:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # called from no event loop: nothing would flush it later
                self._flush()
            else:
                self._timer = loop.call_later(_FLUSH_S, self._flush_later)

    def _flush(self) -> None:
        """Send what is pending (an error the child met is raised here)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending, self._bytes = self._pending, [], 0
        try:
            if self._broken:
                raise BrokenPipeError
            _write_all(self._records, b"".join(pending))
        except BrokenPipeError:
            self._end()
            self._raise()
            raise WriterFailed("the results writer stopped reading") from None

    def _flush_later(self) -> None:
        """The event loop's timer: what waited is sent; a failure waits for the next write."""
        self._timer = None
        pending, self._pending, self._bytes = self._pending, [], 0
        try:
            _write_all(self._records, b"".join(pending))
        except BrokenPipeError:
            self._broken = True

    def finish(self) -> dict[str, Any]:
        """Every record written and the file synced; the summary the child built."""
        self._pending.append(_SUMMARIZE)
        self._flush()  # a child that failed raises its own error here
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

    def _end(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and not self._broken:  # what was handed over is written
            with contextlib.suppress(BrokenPipeError):
                _write_all(self._records, b"".join(self._pending))
        self._pending = []
        os.close(self._records)
        data = bytearray()
        with open(self._answer, "rb", closefd=True) as answer:
            data += answer.read()
        status = 0
        with contextlib.suppress(ChildProcessError):  # reaped by someone else's waitpid(-1)
            status = os.waitpid(self.pid, 0)[1]
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        if not data:
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "no answer"
            self._result = ("error", WriterFailed(f"the results writer (pid {self.pid}): {how}"))
            return
        self._result = pickle.loads(data)

    def _raise(self) -> None:
        if self._result is not None and self._result[0] == "error":
            error, self._result = self._result[1], ("raised", None)
            raise error


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _serve(
    writer: ResultsWriter,
    summarize: Callable[[], dict[str, Any]],
    records: int,
    answer: int,
) -> None:  # pragma: no cover - runs in the forked child
    """The child: append each record handed over, then build the summary if asked; answer
    ``("summary", dict)``, ``("closed", None)`` or ``("error", exception)``, and exit."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's to handle
        gc.freeze()
        keep = {0, 1, 2, records, answer, writer.handle.fileno()}
        for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
            if int(name) not in keep:  # workers' pipes, sockets: their ends stay the parent's
                with contextlib.suppress(OSError):
                    os.close(int(name))
        result: tuple[str, Any] = ("closed", None)
        stream = open(records, "rb", buffering=1 << 16, closefd=True)
        try:
            asked = False
            while True:
                head = stream.read(4)
                if len(head) < 4:
                    break  # the orchestrator closed (or died): what it handed over is written
                size = int.from_bytes(head, "little")
                if not size:
                    asked = True
                    break
                body = stream.read(size)
                if len(body) < size:
                    break
                item = pickle.loads(body)
                if isinstance(item, WrittenLine):
                    writer.write_encoded(item)
                else:
                    writer.write(item)
        finally:
            stream.close()  # a failure: the orchestrator's next record meets a closed pipe
        writer.close()
        if asked:
            result = ("summary", summarize())
    except BaseException as exc:  # noqa: BLE001 - every failure is the orchestrator's to raise
        result = ("error", exc)
    try:
        data = pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)  # an exception that cannot be rebuilt is sent as its message
    except Exception:
        code = 1
        error = result[1]
        data = pickle.dumps(("error", WriterFailed(f"{type(error).__name__}: {error}")))
    with contextlib.suppress(OSError):
        _write_all(answer, data)
    os._exit(code)
