"""Reading what a frozen-world worker sends: pickles that can only hold data.

Env code runs inside the worker and can write to the worker's end of its pipe, so anything the
orchestrator reads from it is untrusted. An ordinary unpickler would call whatever a message
names (``os.system`` through ``__reduce__``) and import any module it names, in the process
that holds the API keys and the run directory. Here a message may name only the classes a
worker's replies are made of: exceptions (built-in, or rlenv's own, already imported) and
`rlenv.agent.ToolOutcome`; any other global raises `UnsafeMessage` before anything is imported
or called (the executor then treats the worker as lost).

Frames are multiprocessing's: a 4-byte big-endian length (-1, then an 8-byte length, for a
message of 2 GiB or more), then the pickle.
"""

from __future__ import annotations

import builtins
import io
import pickle
import struct
import sys
from typing import Any

ALLOWED_CLASSES = {("rlenv.agent", "ToolOutcome")}
"""Classes other than exceptions a reply may hold (constructing one runs no env code)."""


class UnsafeMessage(Exception):
    """A worker's message named something other than the data a reply is made of."""


class _DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if "." in name:
            raise UnsafeMessage(f"{module}.{name}")
        if module == "builtins":
            found = getattr(builtins, name, None)
        elif module.startswith("rlenv.") and module in sys.modules:  # never import
            found = getattr(sys.modules[module], name, None)
        else:
            raise UnsafeMessage(f"{module}.{name}")
        if isinstance(found, type) and (
            issubclass(found, BaseException) or (module, name) in ALLOWED_CLASSES
        ):
            return found
        raise UnsafeMessage(f"{module}.{name}")


def loads(data: bytes | bytearray | memoryview) -> Any:
    """One message, unpickled with nothing but data classes allowed (`UnsafeMessage`)."""
    return _DataUnpickler(io.BytesIO(data)).load()


MAX_MESSAGE = 1 << 31
"""The largest message read (a record of 2 GiB is not one a worker makes)."""
_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")


def frames(buffer: bytearray) -> list[bytes]:
    """The whole frames at the start of `buffer` (removed from it); a partial one stays."""
    found: list[bytes] = []
    start = 0
    while len(buffer) - start >= 4:
        (size,) = _SHORT.unpack_from(buffer, start)
        header = 4
        if size == -1:
            if len(buffer) - start < 12:
                break
            (size,) = _LONG.unpack_from(buffer, start + 4)
            header = 12
        if size < 0 or size > MAX_MESSAGE:
            raise UnsafeMessage(f"a frame of {size} bytes")
        if len(buffer) - start - header < size:
            break
        found.append(bytes(buffer[start + header : start + header + size]))
        start += header + size
    del buffer[:start]
    return found
