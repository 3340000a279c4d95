"""Is a secret still readable in a text? An oracle independent of rlenv.world.secrets: it
decodes what it finds (URL-encoding, JSON escapes, every base64 run at every alignment, so a
secret at any byte offset inside a blob is found) rather than listing the encoded forms the
redactor knows about."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from urllib.parse import unquote, unquote_plus

_RUN = re.compile(r"[A-Za-z0-9+/_-]{4,}")


def _base64_payloads(text: str) -> list[bytes]:
    """Every decoding of every base64-looking run, from each of its first four characters (a
    run glued to base64-alphabet text before it is still found)."""
    found = []
    for match in _RUN.finditer(text):
        run = match.group(0).replace("-", "+").replace("_", "/")
        for start in range(4):
            body = run[start:]
            body = body[: len(body) - 1] if len(body) % 4 == 1 else body
            body += "=" * (-len(body) % 4)  # an unpadded or cut tail still decodes
            if not body:
                continue
            try:
                found.append(base64.b64decode(body, validate=True))
            except (binascii.Error, ValueError):
                continue
    return found


def readable(text: str, secret: str) -> bool:
    """True when `secret` can be read back from `text` in any form."""
    raw = secret.encode()
    plain = [text, unquote(text), unquote_plus(text)]
    with contextlib.suppress(ValueError):
        plain.append(json.loads(f'"{text}"'))
    if any(secret in form for form in plain):
        return True
    return any(raw in payload for payload in _base64_payloads(text))
