"""Secret scrubbing, applied to requests before they are recorded and before they are matched."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from rlenv.spec import LoadedSpec

REDACTED = "REDACTED"

DEFAULT_SECRET_NAMES = (
    # names only: bare "key", "session" or "sig" are too often ordinary request fields, and a
    # scrubbed field no longer tells two recorded requests apart
    r"(?i)^(.*[_-])?(api[_-]?key|apikey|token|access[_-]?token|refresh[_-]?token|id[_-]?token"
    r"|secret|client[_-]?secret|password|passwd|authorization|sessionid|session[_-]?token"
    r"|signature|credential|credentials|private[_-]?key)$"
)
DEFAULT_SECRET_HEADERS = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "openai-organization",
    "x-goog-api-key",
)


class Scrubber:
    """Replaces secret-looking header, query, body and URL-credential values with REDACTED."""

    def __init__(
        self,
        names: str = DEFAULT_SECRET_NAMES,
        headers: Iterable[str] = DEFAULT_SECRET_HEADERS,
        extra_names: Iterable[str] = (),
    ) -> None:
        self.names = re.compile(names)
        self.extra = {name.lower() for name in extra_names}
        self.headers = {name.lower() for name in headers} | self.extra
        # secret values seen in requests, so a response that echoes one is scrubbed too
        self.seen: set[str] = set()

    def _hide(self, value: str) -> str:
        for part in (value, *value.replace(";", " ").replace("=", " ").split()):
            if len(part) >= 8:
                self.seen.add(part)
        return REDACTED

    def redact_seen(self, text: str) -> str:
        for secret in sorted(self.seen, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    def is_secret_name(self, name: str) -> bool:
        return bool(self.names.match(name)) or name.lower() in self.extra

    def is_secret_header(self, name: str) -> bool:
        lowered = name.lower()
        return lowered in self.headers or (
            lowered.startswith("x-") and self.is_secret_name(lowered[2:])
        )

    def url(self, uri: str) -> str:
        parts = urlsplit(uri)
        netloc = parts.netloc
        if "@" in netloc:
            credentials, host = netloc.rsplit("@", 1)
            self._hide(credentials.split(":", 1)[-1])
            netloc = f"{REDACTED}@{host}"
        if parts.query:
            pairs = parse_qsl(parts.query, keep_blank_values=True)
            query = urlencode(
                [
                    (key, self._hide(value) if self.is_secret_name(key) else value)
                    for key, value in pairs
                ]
            )
        else:
            query = parts.query
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

    def json_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: (
                    self._hide(str(item))
                    if self.is_secret_name(str(key))
                    and isinstance(item, str | int)
                    and item not in ("",)
                    else self.json_value(item)
                )
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self.json_value(item) for item in value]
        return value

    def body(self, body: bytes | str | None, content_type: str = "") -> bytes | str | None:
        if not body:
            return body
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        stripped = text.lstrip()
        if "json" in content_type or stripped[:1] in ("{", "["):
            try:
                data = json.loads(text)
            except ValueError:
                return body
            scrubbed = json.dumps(self.json_value(data), separators=(",", ":"), sort_keys=True)
            return scrubbed.encode() if isinstance(body, bytes) else scrubbed
        if "x-www-form-urlencoded" in content_type or ("=" in text and " " not in text):
            pairs = parse_qsl(text, keep_blank_values=True)
            if pairs:
                scrubbed = urlencode(
                    [
                        (key, self._hide(value) if self.is_secret_name(key) else value)
                        for key, value in pairs
                    ]
                )
                return scrubbed.encode() if isinstance(body, bytes) else scrubbed
        return body

    def vcr_request(self, request: Any) -> Any:
        """vcrpy before_record_request hook: scrub URL, headers and body in place."""
        request.uri = self.url(request.uri)
        for name in list(request.headers):
            if self.is_secret_header(name):
                value = request.headers[name]
                for item in value if isinstance(value, list) else [value]:
                    self._hide(str(item))
                request.headers[name] = REDACTED
        content_type = _header(request.headers, "content-type")
        request.body = self.body(request.body, content_type)
        return request

    def vcr_response(self, response: dict[str, Any]) -> dict[str, Any]:
        """vcrpy before_record_response hook: scrub cookies and secret headers of a response."""
        headers = response.get("headers") or {}
        for name in list(headers):
            if self.is_secret_header(name):
                headers[name] = [REDACTED]
            else:
                headers[name] = [self.redact_seen(str(item)) for item in headers[name]]
        body = response.get("body") or {}
        raw = body.get("string")
        if raw:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            scrubbed = self.redact_seen(text)
            try:  # secret-named JSON fields in a response (e.g. an issued token)
                data = json.loads(scrubbed)
                hidden = self.json_value(data)
                if hidden != data:
                    scrubbed = json.dumps(hidden, separators=(",", ":"), sort_keys=True)
            except ValueError:
                pass
            if scrubbed != text:
                body["string"] = scrubbed.encode() if isinstance(raw, bytes) else scrubbed
        return response


def spec_scrubber(loaded: LoadedSpec) -> Scrubber:
    """The scrubber a spec asks for: the default secret names plus its `scrub.extra_names`."""
    extra = loaded.spec.scrub.extra_names if loaded.spec.scrub else []
    return Scrubber(extra_names=extra)


def _header(headers: Any, name: str) -> str:
    for key in headers:
        if key.lower() == name:
            value = headers[key]
            return value[0] if isinstance(value, list) else str(value)
    return ""


TOKEN_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_-]{16,}|sk_live_[A-Za-z0-9]{16,}|ghp_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{30,}"
    r"|Bearer\s+[A-Za-z0-9._~+/-]{12,}=*|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
)


def _mask(value: str) -> str:
    return value[:4] + "…" if len(value) > 4 else "…"


def find_secrets(interactions: list[tuple[Any, dict[str, Any]]], scrubber: Scrubber) -> list[str]:
    """Secret-looking values left in a cassette: where each is (values masked in the message)."""
    found: list[str] = []
    for number, (request, response) in enumerate(interactions):
        where = f"interaction {number}"
        parts = urlsplit(request.uri)
        if "@" in parts.netloc and not parts.netloc.startswith(f"{REDACTED}@"):
            found.append(f"{where}: credentials in the URL")
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if scrubber.is_secret_name(key) and value not in ("", REDACTED):
                found.append(f"{where}: query parameter {key}={_mask(value)}")
        for name, value in (request.headers or {}).items():
            values = value if isinstance(value, list) else [value]
            if scrubber.is_secret_header(name) and any(str(v) != REDACTED for v in values):
                found.append(f"{where}: request header {name}")
        for name, value in (response.get("headers") or {}).items():
            values = value if isinstance(value, list) else [value]
            if scrubber.is_secret_header(name) and any(str(v) != REDACTED for v in values):
                found.append(f"{where}: response header {name}")
        for label, body in (
            ("request body", request.body),
            ("response body", (response.get("body") or {}).get("string")),
        ):
            if not body:
                continue
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if data is not None and scrubber.json_value(data) != data:
                found.append(f"{where}: {label} has a secret-named field")
            elif data is None and "=" in text:
                for key, value in parse_qsl(text, keep_blank_values=True):
                    if scrubber.is_secret_name(key) and value not in ("", REDACTED):
                        found.append(f"{where}: {label} field {key}={_mask(value)}")
            token = TOKEN_PATTERNS.search(text)
            if token:
                found.append(
                    f"{where}: {label} contains a token-like value {_mask(token.group(0))}"
                )
    return found
