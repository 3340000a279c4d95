"""Recording tool HTTP into vcrpy cassettes, scrubbed of secrets before anything is written.

One scrubber serves the whole recording (every call of every tool), so a secret a name rule
hid in one call is searched by value in every other; after each call the cassette file is
swept again with everything known so far, which reaches interactions recorded earlier.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlenv.world.replay import request_key
from rlenv.world.scrub import Scrubber

# record directory -> the scrubber of that recording (one per recording, not per call)
_RECORDING: dict[str, Scrubber] = {}


def _same_request(left: Any, right: Any) -> None:
    """vcrpy matcher: method, normalised URL and canonical body (vcrpy's default ignores bodies)."""
    assert request_key(left.method, left.uri, left.body) == request_key(
        right.method, right.uri, right.body
    ), "request differs"


def recording_scrubber(record_dir: Path, scrubber: Scrubber) -> Scrubber:
    """The recording's one scrubber: the first one given for this record directory."""
    return _RECORDING.setdefault(str(record_dir), scrubber)


@contextlib.contextmanager
def recording_cassette(
    path: Path, scrubber: Scrubber, *, record_errors: bool = False
) -> Iterator[Any]:
    """A vcrpy cassette context that replays what it has and records new interactions."""
    from vcr.cassette import Cassette
    from vcr.record_mode import RecordMode

    scrubber = recording_scrubber(path.parent, scrubber)

    def keep_response(response: dict[str, Any]) -> dict[str, Any] | None:
        status = int((response.get("status") or {}).get("code", 0))
        body = (response.get("body") or {}).get("string")
        if not record_errors and (status >= 400 or not body):
            return None  # error responses and empty bodies are not fixtures unless asked
        return scrubber.vcr_response(response)

    with Cassette.use(
        path=str(path),
        record_mode=RecordMode.NEW_EPISODES,
        match_on=[_same_request],
        before_record_request=lambda request: scrubber.vcr_request(copy.deepcopy(request)),
        before_record_response=keep_response,
        allow_playback_repeats=True,
    ) as cassette:
        yield cassette
    if path.is_file():
        sweep_cassette(path, scrubber)


def _sweep(value: Any, scrubber: Scrubber) -> Any:
    if isinstance(value, dict):
        return {key: _sweep(item, scrubber) for key, item in value.items()}
    if isinstance(value, list):
        return [_sweep(item, scrubber) for item in value]
    return scrubber.values.any(value)


def sweep_cassette(path: Path, scrubber: Scrubber) -> bool:
    """Replace every secret the scrubber knows, by value, anywhere in a cassette file."""
    from vcr.serializers import yamlserializer

    from rlenv.files import atomic_write

    if not scrubber.values.secrets or path.suffix == ".json":
        return False
    text = path.read_text(encoding="utf-8")
    document = yamlserializer.deserialize(text)
    swept = _sweep(document, scrubber)
    if swept == document:
        return False
    atomic_write(path, yamlserializer.serialize(swept))
    return True
