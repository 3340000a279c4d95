"""What in-world code prints: fd 1 and fd 2 of a worker, captured per worker call
(`CapturedOutput`) through two pipes drained for the worker's whole life, the first
`OUTPUT_LIMIT` bytes of each stream kept for the record's ``output`` field."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import termios
from pathlib import Path
from typing import Any

OUTPUT_LIMIT = 16 * 1024
"""Bytes of stdout and of stderr kept per rollout; the rest is read and discarded."""


class _Drain:
    """One pipe and the thread that reads it for the worker's whole life (a thread started and
    joined per call cost more than a python policy's whole rollout). What arrives between a
    call's start and its end marker is that call's output: the first `OUTPUT_LIMIT` bytes kept,
    the rest read and discarded, so a writer never blocks on a full pipe."""

    def __init__(self) -> None:
        import select  # noqa: F401 - what its thread imports, imported here: a fork while
        import threading  # that thread held an import's lock would leave it held for good

        from rlenv.world import reaper  # noqa: F401

        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.write_fd, False)
        self.head = bytearray()
        self.tail = b""
        self.total = 0
        self.marker: bytes | None = None
        self.busy = False  # the drain thread holds bytes it has not yet kept
        self.ended = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True, name="rlenv-drain").start()

    def _run(self) -> None:
        import select

        from rlenv.world.reaper import QUIET_THREADS

        QUIET_THREADS.add(str(threading_native_id()))
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        with open(self.read_fd, "rb", buffering=0, closefd=True) as pipe:
            while True:
                poller.poll()
                self.busy = True  # before the read: `finish` sees it until the bytes are kept
                chunk = pipe.read(65536)
                if not chunk:
                    return
                with self.lock:
                    self.busy = False
                    room = OUTPUT_LIMIT + 64 - len(self.head)  # room for the marker too
                    if room > 0:
                        self.head += chunk[:room]
                    self.total += len(chunk)
                    self.tail = (self.tail + chunk)[-64:]
                    if self.marker is not None and self.tail.endswith(self.marker):
                        self.ended.set()

    def start(self) -> None:
        with self.lock:
            self.head, self.tail, self.total, self.marker = bytearray(), b"", 0, None
            self.ended.clear()

    def finish(self) -> tuple[bytes, bool]:
        """After the call (its writers restored or killed): this call's kept bytes, and
        whether more were written. Waits (at most 5 s, as long as anything still holding the
        pipe may keep writing) for the drain to reach the marker written now."""
        # Nothing waits in the pipe and the drain holds nothing unkept (checked under the lock,
        # after the pipe: the drain marks itself busy before it reads): all was kept, no marker
        # round trip (the common case: nothing written at all).
        if not self.busy and _unread(self.read_fd) == 0:
            with self.lock:
                if not self.busy:
                    total = self.total
                    return bytes(self.head[: min(total, OUTPUT_LIMIT)]), total > OUTPUT_LIMIT
        marker = os.urandom(16)
        with self.lock:
            self.marker = marker
        os.write(self.write_fd, marker)
        self.ended.wait(timeout=5)
        with self.lock:
            total = self.total - len(marker) if self.ended.is_set() else self.total
            kept = bytes(self.head[: min(total, OUTPUT_LIMIT)])
            self.marker = None
        return kept, total > OUTPUT_LIMIT


_drains: list[_Drain] = []


def drain_ends() -> tuple[tuple[int, int], list[int]]:
    """The drains (made now if need be): the write ends a process's fd 1 and 2 are pointed at
    while a call runs, and the read ends, which only their threads here use."""
    if not _drains:
        _drains.extend([_Drain(), _Drain()])
    writing = (_drains[0].write_fd, _drains[1].write_fd)
    return writing, [drain.read_fd for drain in _drains]


def threading_native_id() -> int:
    import threading

    return threading.get_native_id()


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


class CapturedOutput:
    """fd 1 and fd 2 of this process, pointed at the two drain pipes for one worker call; of
    each stream, the first `OUTPUT_LIMIT` bytes are kept."""

    def __init__(self) -> None:
        self.streams = [b"", b""]
        self.truncated = False
        self._saved: list[int] = []

    def __enter__(self) -> CapturedOutput:
        drain_ends()
        _flush_python_streams()
        self._saved = [os.dup(1), os.dup(2)]
        for fd, drain in zip((1, 2), _drains, strict=True):
            drain.start()
            os.dup2(drain.write_fd, fd)
        return self

    def __exit__(self, *exc: object) -> None:
        _flush_python_streams()
        for fd, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        for index, drain in enumerate(_drains):
            self.streams[index], truncated = drain.finish()
            self.truncated |= truncated

    def as_record(self, sanitise: Any) -> dict[str, Any] | None:
        """The record's ``output`` field, or None when nothing was written."""
        if not any(self.streams):
            return None
        stdout, stderr = (sanitise(s.decode("utf-8", "replace")) for s in self.streams)
        return {"stdout": stdout, "stderr": stderr, "truncated": self.truncated}


def _flush_python_streams() -> None:
    streams = {id(stream): stream for stream in (sys.stdout, sys.stderr)}
    streams.update((id(stream), stream) for stream in (sys.__stdout__, sys.__stderr__))
    for stream in streams.values():  # usually two, each named twice: one flush each
        with contextlib.suppress(Exception):
            stream.flush()  # type: ignore[union-attr]


def merge_output(
    first: dict[str, Any] | None, second: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Two calls' output, concatenated per stream and cut to `OUTPUT_LIMIT` characters."""
    if not first or not second:
        return first or second
    merged = {"truncated": bool(first["truncated"] or second["truncated"])}
    for stream in ("stdout", "stderr"):
        text = first[stream] + second[stream]
        if len(text) > OUTPUT_LIMIT:
            text, merged["truncated"] = text[:OUTPUT_LIMIT], True
        merged[stream] = text
    return merged


def keep_output(path: Path, output: dict[str, Any]) -> None:
    """`output` added to what waits at `path` (a rollout's earlier calls' output)."""
    earlier = json.loads(path.read_text()) if path.exists() else None
    path.write_text(json.dumps(merge_output(earlier, output)))


def take_output(path: Path) -> dict[str, Any] | None:
    """What waits at `path`, removed; None when nothing does."""
    if not path.exists():
        return None
    output = json.loads(path.read_text())
    path.unlink()
    return output  # type: ignore[no-any-return]
