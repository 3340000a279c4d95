"""Base URLs of OpenAI-compatible servers, in one form (`normalise_base_url`) and shown without
credentials (`strip_credentials`): the openai provider's and the judge verifier's. Ground floor,
so a grader need not import a provider for it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from rlenv.errors import UserError


def strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def normalise_base_url(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1` all mean `http://h:p/v1`."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(
            f"openai: base URL {strip_credentials(url)!r} is not an http(s) URL",
            where="--base-url",
        )
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UserError(f"openai: base URL {url!r} has a bad port", where="--base-url") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path = f"{path}/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


__all__ = ["normalise_base_url", "strip_credentials"]
