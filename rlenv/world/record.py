"""Recording tool HTTP into vcrpy cassettes, scrubbed of secrets before anything is written."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from rlenv.world.replay import request_key
from rlenv.world.scrub import Scrubber


def _same_request(left: Any, right: Any) -> None:
    """vcrpy matcher: method, normalised URL and canonical body (vcrpy's default ignores bodies)."""
    assert request_key(left.method, left.uri, left.body) == request_key(
        right.method, right.uri, right.body
    ), "request differs"


def recording_cassette(path: Path, scrubber: Scrubber, *, record_errors: bool = False) -> Any:
    """A vcrpy cassette context that replays what it has and records new interactions."""
    from vcr.cassette import Cassette
    from vcr.record_mode import RecordMode

    def keep_response(response: dict[str, Any]) -> dict[str, Any] | None:
        status = int((response.get("status") or {}).get("code", 0))
        body = (response.get("body") or {}).get("string")
        if not record_errors and (status >= 400 or not body):
            return None  # error responses and empty bodies are not fixtures unless asked
        return scrubber.vcr_response(response)

    return Cassette.use(
        path=str(path),
        record_mode=RecordMode.NEW_EPISODES,
        match_on=[_same_request],
        before_record_request=lambda request: scrubber.vcr_request(copy.deepcopy(request)),
        before_record_response=keep_response,
        allow_playback_repeats=True,
    )
