"""A cassette index's responses in three objects (`PackedResponses`), not two per interaction.

As a dict, 10 000 interactions took 3.2 MB of every frozen-world worker (a 64-character key
and a bytes object each, with their allocation overhead and the dict's table), on heap pages
the worker shares with its template and every rollout's child: issue 30's peak memory. Packed,
the same index is its digests and responses one after another (2.1 MB), and a lookup is a
binary search over the sorted digests (about 3 µs at 10 000, against a tool call's
milliseconds).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator, Mapping

_DIGEST = 32  # a request key is the hex of a sha256 digest (`rlenv.world.replay.request_key`)


def _is_key(key: object) -> bool:
    """A request key as `request_key` makes them: the lower-case hex of 32 bytes."""
    if not isinstance(key, str) or len(key) != 2 * _DIGEST:
        return False
    try:
        return bytes.fromhex(key).hex() == key
    except ValueError:
        return False


class PackedResponses(Mapping[str, bytes]):
    """Request key (64 lower-case hex characters) -> packed response, read-only."""

    __slots__ = ("_digests", "_ends", "_blob")

    def __init__(self, items: Mapping[str, bytes] | None = None) -> None:
        ordered = sorted((items or {}).items())  # lower-case hex sorts as its digest does
        for key, _ in ordered:
            if not _is_key(key):
                raise ValueError(f"not a request key: {key!r}")
        self._digests = b"".join(bytes.fromhex(key) for key, _ in ordered)
        self._ends = array("Q", itertools.accumulate(len(value) for _, value in ordered))
        self._blob = b"".join(value for _, value in ordered)

    def _position(self, key: object) -> int:
        """Where `key` is in the sorted digests; -1 when it is not a key held here."""
        if not _is_key(key):
            return -1
        digest = bytes.fromhex(key)  # type: ignore[arg-type]
        digests = self._digests
        low, high = 0, len(self._ends)
        while low < high:
            middle = (low + high) // 2
            if digests[middle * _DIGEST : (middle + 1) * _DIGEST] < digest:
                low = middle + 1
            else:
                high = middle
        if digests[low * _DIGEST : (low + 1) * _DIGEST] == digest:
            return low
        return -1

    def _value(self, position: int) -> bytes:
        start = self._ends[position - 1] if position else 0
        return self._blob[start : self._ends[position]]

    def get(self, key: object, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        position = self._position(key)
        return default if position < 0 else self._value(position)

    def __getitem__(self, key: str) -> bytes:
        position = self._position(key)
        if position < 0:
            raise KeyError(key)
        return self._value(position)

    def __contains__(self, key: object) -> bool:
        return self._position(key) >= 0

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator[str]:
        digests = self._digests
        for position in range(len(self._ends)):
            yield digests[position * _DIGEST : (position + 1) * _DIGEST].hex()

    def __getstate__(self) -> tuple[bytes, bytes, bytes]:
        return self._digests, self._ends.tobytes(), self._blob

    def __setstate__(self, state: tuple[bytes, bytes, bytes]) -> None:
        self._digests, ends, self._blob = state
        self._ends = array("Q")
        self._ends.frombytes(ends)
