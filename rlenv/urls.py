"""Base URLs of OpenAI-compatible servers, in one form (`normalise_base_url`) and shown without
credentials (`strip_credentials`): the openai provider's and the judge verifier's. Ground floor,
so a grader need not import a provider for it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rlenv.errors import UserError


def strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


SECRET_QUERY = re.compile(r"(?i)(key|token|secret|sig|pass|auth|cred|code|session)")
"""Query parameter names whose values are secrets (replaced in what is shown or written)."""


def public_url(url: str) -> str:
    """A base URL fit for run.json: no userinfo, secret-named query values replaced."""
    parts = urlsplit(strip_credentials(url))
    pairs = [
        (name, "REDACTED" if SECRET_QUERY.search(name) else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(pairs), ""))


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


__all__ = ["SECRET_QUERY", "normalise_base_url", "public_url", "strip_credentials"]
