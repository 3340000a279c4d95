"""Secrets by value: which secrets are in play while recording, every form they can take in
an HTTP exchange (raw, URL-encoded, JSON-escaped, base64 at any byte offset), and the
detect-secrets scan `rlenv validate` runs over cassettes.

The name rules in `scrub.py` catch a secret where it is labelled; these catch it wherever it
travels: in a URL path, a plain-text or XML body, a base64 blob, a gzip body, an echo in a
later response.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

MIN_SECRET = 8  # shorter values are too often ordinary text to be replaced everywhere

SECRET_ENV_NAME = re.compile(
    r"(?i)(key|token|secret|passw|pwd|credential|jwt|bearer|auth(?!ority)|signature|cookie)"
)


def url_secrets(url: str) -> set[str]:
    """The userinfo and the query values of a URL (a base URL's secrets)."""
    found: set[str] = set()
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return found
    if parts.password:
        found.add(parts.password)
    if "@" in parts.netloc:
        found.add(parts.netloc.rsplit("@", 1)[0])
    # pragma below: a blank value is shorter than MIN_SECRET, kept or not
    for _, value in parse_qsl(parts.query, keep_blank_values=True):  # pragma: no mutate
        found.add(value)
    return {value for value in found if len(value) >= MIN_SECRET}


def secrets_in_play(environ: Mapping[str, str], urls: Iterable[str | None] = ()) -> set[str]:
    """Secret-named environment values, plus the credentials and query values of URLs found in
    the environment (tool base URLs) or given (`--base-url`)."""
    found: set[str] = set()
    for name, value in environ.items():
        if SECRET_ENV_NAME.search(name) and len(value) >= MIN_SECRET and "\n" not in value:
            found.add(value)
        if "://" in value:
            found |= url_secrets(value)
    for url in urls:
        if url:
            found |= url_secrets(url)
    return found


def _base64_forms(raw: bytes) -> set[str]:
    """Base64 (standard and URL-safe) of raw at byte offsets 0, 1 and 2 of a larger blob: the
    characters that depend on raw alone."""
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode()
        forms.add(whole)
        forms.add(whole.rstrip("="))
        for offset in range(3):
            encoded = encode(b"\0" * offset + raw).decode()
            start = 4 if offset else 0
            stable = 4 * ((offset + len(raw)) // 3)
            forms.add(encoded[start:stable])
    return {form for form in forms if len(form) >= MIN_SECRET}


def variants(secret: str) -> set[str]:
    """Every form a secret takes in a request or response: raw, URL-encoded, JSON-escaped,
    base64 (also at an offset inside a larger blob)."""
    forms = {
        secret,
        # pragmas: quote never escapes letters, so safe="XX/XX" is safe="/" (its default)
        quote(secret, safe=""),  # pragma: no mutate
        quote(secret, safe="/"),  # pragma: no mutate
        quote_plus(secret),
        quote_plus(secret, safe="/"),  # pragma: no mutate
        json.dumps(secret)[1:-1],
    }
    forms |= _base64_forms(secret.encode())
    return {form for form in forms if len(form) >= MIN_SECRET}


class ValueRedactor:
    """Replaces every known secret, in every form, in text and bytes (gzip bodies included)."""

    def __init__(self, secrets: Iterable[str] = (), replacement: str = "REDACTED") -> None:
        self.replacement = replacement
        self.secrets: set[str] = set()
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        new = {s for s in secrets if len(s) >= MIN_SECRET and s != self.replacement}
        if new - self.secrets:
            self.secrets |= new
            self._text = self._bytes = None

    def compile(self) -> None:
        """Build the search patterns now (they are built when first needed): a frozen-world
        worker builds them before it forks the template every rollout's child is forked from,
        so no child builds them again (two regular expressions compiled per rollout, in
        every child, and the pages that compiling touched copied in each)."""
        self._patterns()

    def _patterns(self) -> tuple[re.Pattern[str] | None, re.Pattern[bytes] | None]:
        if self._text is None and self.secrets:
            # longest first, so a form that is a prefix of another never matches half of it
            # (pragma: reverse lexical order also puts the longer of two such forms first)
            every = {v for s in self.secrets for v in variants(s)}
            forms = sorted(every, key=len, reverse=True)  # pragma: no mutate
            self._text = re.compile("|".join(re.escape(form) for form in forms))
            self._bytes = re.compile(b"|".join(re.escape(form.encode()) for form in forms))
        return self._text, self._bytes

    def text(self, value: str) -> str:
        pattern = self._patterns()[0]
        return pattern.sub(self.replacement, value) if pattern is not None else value

    def data(self, value: bytes) -> bytes:
        pattern = self._patterns()[1]
        if pattern is None:
            return value
        if value[:2] == b"\x1f\x8b":  # gzip: search inside, keep it gzip
            try:
                inner = gzip.decompress(value)
            except (OSError, EOFError, zlib.error):
                return pattern.sub(self.replacement.encode(), value)
            scrubbed = self.data(inner)
            return value if scrubbed == inner else gzip.compress(scrubbed, mtime=0)
        return pattern.sub(self.replacement.encode(), value)

    def any(self, value: Any) -> Any:
        if isinstance(value, bytes):
            return self.data(value)
        if isinstance(value, str):
            return self.text(value)
        return value


# ---- detect-secrets scan of a cassette -------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One suspected secret: where, what kind, and the sha256 of its value (never the value)."""

    where: str
    kind: str
    sha256: str

    def message(self) -> str:
        return f"{self.where}: {self.kind} (to allow it: scrub.allow: [sha256:{self.sha256}])"


def _plugins() -> list[Any]:
    # imported here: detect-secrets loads all its plugins, too slow for `rlenv --help`
    from detect_secrets.plugins.high_entropy_strings import (
        Base64HighEntropyString,
        HexHighEntropyString,
    )
    from detect_secrets.plugins.keyword import KeywordDetector

    return [KeywordDetector(), Base64HighEntropyString(limit=4.5), HexHighEntropyString(limit=3.0)]


_XML_FIELD = re.compile(r"<([A-Za-z_][\w.-]*)[^>]*>([^<]{1,500})</\1>")
_TOKEN = re.compile(r"[A-Za-z0-9+/=_\-.~]{16,}")


def _lines(text: str) -> Iterator[str]:
    """Lines as detect-secrets reads them, plus the shapes it cannot see in raw HTTP text:
    bare tokens (quoted for the entropy plugins) and XML fields as `name = "value"`."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict | list):
        text = json.dumps(data, indent=1, sort_keys=True)
    for line in text.splitlines():
        if len(line) > 5000:
            line = line[:5000]
        yield line
        for name, value in _XML_FIELD.findall(line):
            yield f'{name} = "{value}"'
        for token in _TOKEN.findall(line):
            yield f'"{token}"'


def _body_text(body: Any) -> str | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        if body[:2] == b"\x1f\x8b":
            with contextlib.suppress(OSError, EOFError, zlib.error):
                body = gzip.decompress(body)
        return body.decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    return json.dumps(body)


def scan(interactions: list[tuple[Any, dict[str, Any]]], redacted: str) -> list[Finding]:
    """detect-secrets (keyword and high-entropy plugins) over URLs, headers and bodies."""
    plugins = _plugins()
    found: dict[tuple[str, str], Finding] = {}
    for number, (request, response) in enumerate(interactions):
        where = f"interaction {number}"
        pieces: list[tuple[str, str | None]] = [(f"{where} request URL", request.uri)]
        for label, headers in (
            ("request header", request.headers or {}),
            ("response header", response.get("headers") or {}),
        ):
            for name, value in headers.items():
                values = value if isinstance(value, list) else [value]
                pieces += [(f"{where} {label} {name}", f"{name}: {v}") for v in values]
        pieces.append((f"{where} request body", _body_text(request.body)))
        pieces.append(
            (f"{where} response body", _body_text((response.get("body") or {}).get("string")))
        )
        for label, text in pieces:
            if not text:
                continue
            for line in _lines(text):
                for plugin in plugins:
                    for secret in plugin.analyze_line(filename="cassette", line=line):
                        value = secret.secret_value or ""
                        if not value or redacted in value:
                            continue
                        digest = hashlib.sha256(value.encode()).hexdigest()
                        found.setdefault((label, digest), Finding(label, secret.type, digest))
    return list(found.values())


_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_INTERACTION = re.compile(r"^interaction (\d+)")


def unallowed(findings: list[str], cassette_name: str, allow: list[str]) -> list[str]:
    """The findings the spec's `scrub.allow` does not cover. An entry is `sha256:HEX` (the hash
    of the flagged value, as the refusal prints it) or `CASSETTE#interaction N` (all of one
    interaction): neither holds the secret itself."""
    allowed = set(allow)
    kept = []
    for finding in findings:
        digest = _DIGEST.search(finding)
        if digest and f"sha256:{digest.group(1)}" in allowed:
            continue
        number = _INTERACTION.match(finding)
        if number and f"{cassette_name}#interaction {number.group(1)}" in allowed:
            continue
        kept.append(finding)
    return kept
