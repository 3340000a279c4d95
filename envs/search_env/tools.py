"""The search env's ``search`` tool: a real HTTP client of the search service.

At run time rlenv replays this tool's HTTP from its cassette; ``rlenv record`` runs it against
the live service, which it starts itself from the spec's ``services:`` block. The base URL is
the service's logical URL, ``ctx.services["search"]`` (also in ``RLENV_SEARCH_URL``, which rlenv
sets in the frozen world: ``http://search.rlenv.internal``); outside rlenv the variable or
``DEFAULT_URL`` is used. An optional API key comes from ``SEARCH_API_KEY`` (sent as
``X-Api-Key``; the recorder scrubs it).
"""

from __future__ import annotations

import os
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8765"
TIMEOUT_SECONDS = 10.0

SEARCH_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "k": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["query"],
    "additionalProperties": False,
}


_client: httpx.Client | None = None


def _http() -> httpx.Client:
    """One client per process: creating one per call costs an SSL context (~40 ms)."""
    global _client
    if _client is None:
        _client = httpx.Client(timeout=TIMEOUT_SECONDS)
    return _client


class SearchServiceError(RuntimeError):
    """The search service answered with a non-200 status."""


def search(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """POST {base}/search with {"query", "k"} and return the parsed JSON response."""
    services = getattr(ctx, "services", None) or {}
    base = (services.get("search") or os.environ.get("RLENV_SEARCH_URL", DEFAULT_URL)).rstrip("/")
    headers = {}
    api_key = os.environ.get("SEARCH_API_KEY")
    if api_key:
        headers["X-Api-Key"] = api_key
    response = _http().post(
        f"{base}/search",
        json={"query": args["query"], "k": args.get("k", 3)},
        headers=headers,
    )
    if response.status_code != 200:
        raise SearchServiceError(
            f"search service at {base} returned HTTP {response.status_code}: {response.text[:200]}"
        )
    result: dict[str, Any] = response.json()
    return result
