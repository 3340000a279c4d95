"""Secret scrubbing, applied to requests before they are recorded and before they are matched."""

from __future__ import annotations

import base64
import binascii
import contextlib
import gzip
import json
import os
import re
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from rlenv.spec import LoadedSpec

from rlenv.world.secrets import ValueRedactor, secrets_in_play

REDACTED = "REDACTED"

DEFAULT_SECRET_NAMES = (
    # names only: bare "key", "session" or "sig" are too often ordinary request fields, and a
    # scrubbed field no longer tells two recorded requests apart
    # (camelCase names are matched with their humps split: authToken -> auth_Token)
    r"(?i)^(.*[_ .-])?(api[_ -]?key|apikey|token|access[_-]?token|refresh[_-]?token|id[_-]?token"
    r"|auth[_-]?token|secret|client[_-]?secret|secret[_-]?access[_-]?key|access[_-]?key"
    r"|password|passwd|passphrase|authorization|sessionid|session[_-]?token|jwt|bearer"
    r"|signature|credential|credentials|private[_-]?key|private[_-]?token|subscription[_-]?key)$"
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
    "private-token",
    "x-amz-security-token",
)


class Scrubber:
    """Replaces secret-looking header, query, body and URL-credential values with REDACTED."""

    def __init__(
        self,
        names: str = DEFAULT_SECRET_NAMES,
        headers: Iterable[str] = DEFAULT_SECRET_HEADERS,
        extra_names: Iterable[str] = (),
        known: Iterable[str] | None = None,
    ) -> None:
        self.names = re.compile(names)
        self.extra = {name.lower() for name in extra_names}
        self.headers = {name.lower() for name in headers} | self.extra
        self._secret_names: dict[str, bool] = {}
        # secrets searched by value everywhere: those in play (secret-named environment
        # variables, credentials and query values of URLs in the environment) and every value
        # a name rule hid, so a later request or response that carries one is scrubbed too
        self.values = ValueRedactor(
            secrets_in_play(os.environ) if known is None else known, REDACTED
        )

    @property
    def seen(self) -> set[str]:
        return self.values.secrets

    def _hide(self, value: str) -> str:
        parts = {value, *value.replace(";", " ").replace("=", " ").replace(",", " ").split()}
        for part in list(parts):  # a Basic credential: its user:password and password too
            try:
                decoded = base64.b64decode(part, validate=True).decode()
            except (binascii.Error, ValueError):
                continue
            if ":" in decoded:
                parts |= {decoded, decoded.split(":", 1)[1]}
        self.values.add(part for part in parts if part.lower() not in _NOT_SECRET)
        return REDACTED

    def redact_seen(self, text: str) -> str:
        return self.values.text(text)

    def is_secret_name(self, name: str) -> bool:
        # pragma: a cache of a pure function; without it the same verdict is recomputed
        known = self._secret_names.get(name)  # pragma: no mutate
        if known is not None:
            return known
        humps = _HUMPS.sub("_", name)
        secret = (
            bool(self.names.match(name))
            or bool(self.names.match(humps))
            or name.lower() in self.extra
        )
        if len(self._secret_names) < _NAMES_KEPT:  # a pure function of the name: remembered
            self._secret_names[name] = secret
        return secret

    def is_secret_header(self, name: str) -> bool:
        lowered = name.lower()
        return (
            lowered in self.headers
            or self.is_secret_name(lowered)
            # pragma: "x-NAME" and "...-subscription-key" also match the name rule (a
            # separator, then a secret name), so these two tests only save a regex match
            or (lowered.startswith("x-") and self.is_secret_name(lowered[2:]))  # pragma: no mutate
            or (lowered.startswith("x-") and lowered.endswith("-auth"))
            or lowered.endswith("-subscription-key")  # pragma: no mutate
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
        path = self.redact_seen(parts.path)
        query = self.redact_seen(query)
        return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))

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
        """Name rules (JSON, form, multipart fields), then every known secret by value."""
        named = self._named_body(body, content_type)
        return self.values.any(named)

    def _named_body(self, body: bytes | str | None, content_type: str) -> bytes | str | None:
        if not body or not isinstance(body, bytes | str):
            return body
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        if isinstance(body, bytes) and text.encode() != body:
            return body  # binary (gzip, images): searched by value only
        stripped = text.lstrip()
        if "multipart/" in content_type or _MULTIPART.match(text):
            scrubbed = _MULTIPART_FIELD.sub(
                lambda m: (
                    m.group(1) + self._hide(m.group(3)) + m.group(4)
                    if self.is_secret_name(m.group(2))
                    else m.group(0)
                ),
                text,
            )
            return scrubbed.encode() if isinstance(body, bytes) else scrubbed
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
            value = request.headers[name]
            if self.is_secret_header(name):
                for item in value if isinstance(value, list) else [value]:
                    self._hide(str(item))
                request.headers[name] = REDACTED
        for name in list(request.headers):
            value = request.headers[name]
            if isinstance(value, list):
                request.headers[name] = [self.redact_seen(str(item)) for item in value]
            else:
                request.headers[name] = self.redact_seen(str(value))
        content_type = _header(request.headers, "content-type")
        request.body = self.body(request.body, content_type)
        return request

    def vcr_response(self, response: dict[str, Any]) -> dict[str, Any]:
        """vcrpy before_record_response hook: scrub cookies and secret headers of a response."""
        headers = response.get("headers") or {}
        for name in list(headers):
            if self.is_secret_header(name):
                for item in headers[name]:
                    self._hide(str(item))
                headers[name] = [REDACTED]
        for name in list(headers):
            headers[name] = [self.redact_seen(str(item)) for item in headers[name]]
        body = response.get("body") or {}
        raw = body.get("string")
        if raw:
            raw = self.values.any(raw)
            body["string"] = raw
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            if isinstance(raw, bytes) and text.encode() != raw:
                return response  # binary (gzip): searched by value only
            scrubbed = text
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


_NOT_SECRET = {"httponly", "secure", "samesite", "bearer", "basic", "max-age", "expires"}
_HUMPS = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAMES_KEPT = 4096  # field names whose verdict a scrubber remembers (bodies repeat their names)
_MULTIPART = re.compile(r"^--[^\r\n]{1,200}\r?\n")
_MULTIPART_FIELD = re.compile(
    r'(Content-Disposition:[^\r\n]*\bname="([^"]*)"[^\r\n]*\r?\n(?:[^\r\n]+\r?\n)*\r?\n)'
    r"(.*?)(\r?\n--)",
    re.IGNORECASE | re.DOTALL,
)


def _header(headers: Any, name: str) -> str:
    for key in headers:
        if key.lower() == name:
            value = headers[key]
            return value[0] if isinstance(value, list) else str(value)
    return ""


TOKEN_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_-]{16,}|sk_live_[A-Za-z0-9]{16,}|ghp_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{30,}"
    r"|Bearer\s+[A-Za-z0-9._~+/-]{12,}=*|Basic\s+[A-Za-z0-9+/]{12,}=*|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
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
        # pragma: a blank value is skipped below, kept by parse_qsl or not
        for key, value in parse_qsl(parts.query, keep_blank_values=True):  # pragma: no mutate
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
            if isinstance(body, bytes) and body[:2] == b"\x1f\x8b":
                with contextlib.suppress(OSError, EOFError, zlib.error):
                    body = gzip.decompress(body)
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            if not text.lstrip().startswith(("{", "[")):
                hidden = Scrubber(known=())._named_body(text, "")
                if hidden != text:
                    found.append(f"{where}: {label} has a secret-named field")
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if data is not None and scrubber.json_value(data) != data:
                found.append(f"{where}: {label} has a secret-named field")
            elif data is None and "=" in text:
                # pragma: a blank value is skipped below, kept by parse_qsl or not
                for key, value in parse_qsl(text, keep_blank_values=True):  # pragma: no mutate
                    if scrubber.is_secret_name(key) and value not in ("", REDACTED):
                        found.append(f"{where}: {label} field {key}={_mask(value)}")
            token = TOKEN_PATTERNS.search(text)
            if token:
                found.append(
                    f"{where}: {label} contains a token-like value {_mask(token.group(0))}"
                )
    from rlenv.world.secrets import scan

    found += [finding.message() for finding in scan(interactions, REDACTED)]
    return found
