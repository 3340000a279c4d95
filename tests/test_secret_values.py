"""rlenv.world.secrets and rlenv.world.scrub in process (fast: the mutation run's set for both).

A secret must not be readable back from what is recorded, in any form; the oracle
(`tests.secret_oracle.readable`) decodes rather than listing forms, so base64 at any byte
offset of a blob is searched (issue 27: the cassette test's own oracle searched offset 0 only).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from rlenv.world.scrub import REDACTED, Scrubber, find_secrets
from rlenv.world.secrets import (
    MIN_SECRET,
    Finding,
    ValueRedactor,
    scan,
    secrets_in_play,
    unallowed,
    url_secrets,
    variants,
)
from tests.secret_oracle import readable

SECRET = "s3cr3t-Value-Qz81"


def b64(data: bytes, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()


def test_oracle_finds_base64_at_every_offset() -> None:
    """The oracle can fail: it sees the secret wherever a blob puts it."""
    for prefix in range(6):
        for suffix in range(4):
            blob = b64(b"p" * prefix + SECRET.encode() + b"s" * suffix)
            assert readable("data:" + blob, SECRET)
            assert readable("xx" + blob, SECRET)
            assert readable(blob.rstrip("="), SECRET)
    assert readable(quote(SECRET), SECRET) and readable(json.dumps(SECRET), SECRET)
    assert not readable(b64(b"unrelated text here"), SECRET)


@pytest.mark.parametrize("urlsafe", [False, True])
@pytest.mark.parametrize("prefix", range(6))
@pytest.mark.parametrize("suffix", range(4))
def test_base64_at_any_offset_is_redacted(prefix: int, suffix: int, urlsafe: bool) -> None:
    redactor = ValueRedactor([SECRET])
    blob = b64(b"\xfb" * prefix + SECRET.encode() + b"\xff" * suffix, urlsafe)
    for text in (blob, "data:" + blob, blob.rstrip("=")):
        out = redactor.text(text)
        assert not readable(out, SECRET), (prefix, suffix, out)
        assert REDACTED in out
        assert not readable(redactor.data(text.encode()).decode(), SECRET)


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        quote(SECRET + "/+ &", safe=""),
        quote(SECRET + "/+ &", safe="/"),
        quote_plus(SECRET + "/+ &"),
        quote_plus(SECRET + "/+ &", safe="/"),
        json.dumps(SECRET + '"\\')[1:-1],
    ],
)
def test_encoded_forms_are_redacted(form: str) -> None:
    secret = SECRET + ("/+ &" if "%" in form or "+" in form else "")
    secret = secret + ('"\\' if "\\" in form else "")
    redactor = ValueRedactor([secret])
    out = redactor.text(f"before {form} after")
    assert out == f"before {REDACTED} after"


def test_variants_are_long_enough_and_include_the_forms() -> None:
    forms = variants(SECRET)
    assert SECRET in forms and b64(SECRET.encode()) in forms
    assert b64(SECRET.encode(), True).rstrip("=") in forms
    assert all(len(form) >= MIN_SECRET for form in forms)
    assert variants("short") == {b64(b"short")}  # its raw form is too short to search
    assert MIN_SECRET == 8
    # the longest form first: a raw secret inside its own base64 is not half-replaced
    redactor = ValueRedactor(["abcdefgh", "abcdefghij"])
    assert redactor.text("x abcdefghij y") == f"x {REDACTED} y"


def test_redactor_bytes_gzip_and_other_values() -> None:
    redactor = ValueRedactor([SECRET], replacement="XX-HIDDEN")
    assert redactor.text(f"a {SECRET} b") == "a XX-HIDDEN b"
    assert redactor.data(f"a {SECRET} b".encode()) == b"a XX-HIDDEN b"
    zipped = gzip.compress(f"in {SECRET} zip".encode(), mtime=0)
    out = redactor.data(zipped)
    assert out[:2] == b"\x1f\x8b" and gzip.decompress(out) == b"in XX-HIDDEN zip"
    clean = gzip.compress(b"nothing here", mtime=0)
    assert redactor.data(clean) is clean
    broken = b"\x1f\x8b" + f"not gzip {SECRET}".encode()
    assert redactor.data(broken) == b"\x1f\x8bnot gzip XX-HIDDEN"
    assert redactor.any(f"{SECRET}") == "XX-HIDDEN"
    assert redactor.any(SECRET.encode()) == b"XX-HIDDEN"
    assert redactor.any(42) == 42 and redactor.any(None) is None
    empty = ValueRedactor()
    assert empty.text(SECRET) == SECRET and empty.data(SECRET.encode()) == SECRET.encode()


def test_redactor_add() -> None:
    redactor = ValueRedactor(["short", REDACTED * 2])
    assert redactor.secrets == {REDACTED * 2}
    redactor = ValueRedactor(replacement="REPLACED-WORD")
    redactor.add(["REPLACED-WORD", "tiny", SECRET])
    assert redactor.secrets == {SECRET}
    assert redactor.text(SECRET) == "REPLACED-WORD"
    redactor.add(["another-secret-9"])  # a new secret resets the compiled patterns
    assert redactor.text("another-secret-9") == "REPLACED-WORD"
    assert redactor.data(b"another-secret-9") == b"REPLACED-WORD"


def test_url_secrets() -> None:
    assert url_secrets("https://bob:hunter2-long@host/p?q=value-long-1&x=1") == {
        "hunter2-long",
        "bob:hunter2-long",
        "value-long-1",
    }
    assert url_secrets("  https://host/p?empty=&k=abcdefgh  ") == {"abcdefgh"}
    assert url_secrets("https://tok-only-user@host/") == {"tok-only-user"}
    assert url_secrets("http://[::1") == set()
    assert url_secrets("https://host/p?k=abcdefg") == set()


def test_secrets_in_play() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-abcdefgh",
        "MY_TOKEN": "short",
        "DB_PASSWORD": "two\nlines-long",
        "AUTHORITY": "not-a-secret-value",
        "HOME": "/root/not/secret",
        "SERVICE_URL": "https://svc/x?sig=abcdefghijk",
        "session_cookie": "cookie-value-1",
    }
    assert secrets_in_play(environ) == {"sk-abcdefgh", "abcdefghijk", "cookie-value-1"}
    assert secrets_in_play({}, ["https://h/?code=abcdefgh", None, ""]) == {"abcdefgh"}
    assert secrets_in_play({"KEYWORD": "exactly8"}) == {"exactly8"}
    assert secrets_in_play({"KEY": "seven77"}) == set()


def test_finding_and_unallowed() -> None:
    finding = Finding("interaction 2 request body", "Secret Keyword", "ab" * 32)
    message = finding.message()
    assert message == (
        "interaction 2 request body: Secret Keyword (to allow it: scrub.allow: "
        f"[sha256:{'ab' * 32}])"
    )
    other = "interaction 3 response body: Hex High Entropy String (...)"
    assert unallowed([message, other], "c.yaml", []) == [message, other]
    assert unallowed([message, other], "c.yaml", [f"sha256:{'ab' * 32}"]) == [other]
    assert unallowed([message, other], "c.yaml", ["c.yaml#interaction 3"]) == [message]
    assert unallowed([message, other], "d.yaml", ["c.yaml#interaction 3"]) == [message, other]
    assert unallowed([message], "c.yaml", ["c.yaml#interaction 2", "x"]) == []


def request(uri: str, body: Any = None, headers: dict[str, Any] | None = None) -> Any:
    return SimpleNamespace(uri=uri, body=body, headers=headers or {})


def response(body: Any = None, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"headers": headers or {}, "body": {"string": body}}


def test_scan_finds_keyword_and_entropy_and_skips_redacted() -> None:
    token = "AKzx93JfqLm20PqrT7vbN4wsY8ud"
    interactions = [
        (request("https://h/a", body=json.dumps({"note": f"password = '{token}'"})), response()),
        (request("https://h/b"), response(body=f"<data><key>{token}</key></data>".encode())),
        (request("https://h/c", headers={"X-Thing": [f"value {token}"]}), response()),
        (request("https://h/d", body=f"password = '{REDACTED}'"), response()),
    ]
    found = scan(interactions, REDACTED)
    wheres = {finding.where for finding in found}
    assert "interaction 0 request body" in wheres
    assert "interaction 1 response body" in wheres
    assert "interaction 2 request header X-Thing" in wheres
    assert not any(where.startswith("interaction 3") for where in wheres)
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert any(finding.sha256 == digest for finding in found)
    zipped = gzip.compress(f"<k>{token}</k>".encode(), mtime=0)
    assert scan([(request("https://h/e"), response(body=zipped))], REDACTED)
    assert scan([(request("https://h/f"), response(body={"secret": token}))], REDACTED)
    assert scan([(request("https://h/g"), response())], REDACTED) == []


# ---- scrub.Scrubber ---------------------------------------------------------------------------


def scrubber(**kwargs: Any) -> Scrubber:
    return Scrubber(known=(), **kwargs)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("x_api-key", True),
        ("access_token", True),
        ("authToken", True),
        ("client_secret", True),
        ("password", True),
        ("PASSWORD", True),
        ("private-key", True),
        ("key", False),
        ("session", False),
        ("monkey", False),
        ("tokens", False),
        ("query", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert scrubber().is_secret_name(name) is secret


def test_extra_names_and_headers() -> None:
    scrub = scrubber(extra_names=["Custom"])
    assert scrub.is_secret_name("custom") and scrub.is_secret_header("CUSTOM")
    assert scrub.is_secret_name("custom")  # remembered
    for header in ("Authorization", "Cookie", "x-api-key", "X-Token", "X-Foo-Auth",
                   "Ocp-Apim-Subscription-Key", "api_key"):  # fmt: skip
        assert scrub.is_secret_header(header), header
    for header in ("Content-Type", "X-Request-Id", "Accept", "X-Authority"):
        assert not scrub.is_secret_header(header), header


def test_url_scrubbing_hides_and_remembers() -> None:
    scrub = scrubber()
    url = scrub.url("https://bob:pa55word-long@h/p?api_key=KEY12345678&q=search")
    assert url == f"https://{REDACTED}@h/p?api_key={REDACTED}&q=search"
    assert "pa55word-long" in scrub.seen and "KEY12345678" in scrub.seen
    # a secret once hidden is then redacted wherever it travels
    assert scrub.url("https://h/KEY12345678/x?q=KEY12345678") == (
        f"https://h/{REDACTED}/x?q={REDACTED}"
    )
    assert scrub.redact_seen("echo KEY12345678") == f"echo {REDACTED}"
    assert scrub.url("https://h/p") == "https://h/p"
    assert scrub.url("https://h/p#frag") == "https://h/p#frag"


def test_basic_credentials_are_remembered_decoded() -> None:
    scrub = scrubber()
    basic = b64(b"alice:wonderland-9")
    req = request("https://h/", headers={"Authorization": f"Basic {basic}"})
    scrub.vcr_request(req)
    assert req.headers["Authorization"] == REDACTED
    assert {"alice:wonderland-9", "wonderland-9", basic} <= scrub.seen
    assert "basic" not in {value.lower() for value in scrub.seen}
    assert scrub.redact_seen("pw wonderland-9") == f"pw {REDACTED}"


def test_cookie_parts_are_remembered_but_not_attributes() -> None:
    scrub = scrubber()
    scrub.vcr_response(
        response(headers={"Set-Cookie": ["sid=cookie-value-1; HttpOnly; Secure; Max-Age=60"]})
    )
    assert "cookie-value-1" in scrub.seen
    assert not {"HttpOnly", "Secure", "httponly", "Max-Age"} & scrub.seen


def test_json_bodies() -> None:
    scrub = scrubber()
    body = json.dumps({"b": [{"token": "tok-abcdefgh"}], "a": 1, "password": 12345678, "x": ""})
    out = scrub.body(body, "application/json")
    assert json.loads(out) == {"a": 1, "b": [{"token": REDACTED}], "password": REDACTED, "x": ""}
    assert out == json.dumps(json.loads(out), separators=(",", ":"), sort_keys=True)
    assert scrub.body(body.encode(), "") == out.encode()
    assert scrub.body('{"password": ""}', "") == '{"password":""}'
    assert scrub.body('{"secret": null}', "") == '{"secret":null}'
    assert scrub.body("{not json", "application/json") == "{not json"
    assert scrub.body(" [1, 2]", "") == "[1,2]"


def test_form_and_multipart_bodies() -> None:
    scrub = scrubber()
    assert scrub.body("user=bob&password=hunter2-long", "") == f"user=bob&password={REDACTED}"
    assert scrub.body(b"user=bob&password=hunter2-long", "") == (
        f"user=bob&password={REDACTED}".encode()
    )
    form = "user=bob&password=hunter2-long"
    typed = scrub.body(form, "application/x-www-form-urlencoded")
    assert typed == f"user=bob&password={REDACTED}"
    assert scrub.body("a sentence with = sign", "text/plain") == "a sentence with = sign"
    multipart = (
        '--XyZ\r\nContent-Disposition: form-data; name="token"\r\n\r\nmp-secret-123\r\n'
        '--XyZ\r\nContent-Disposition: form-data; name="note"\r\n\r\nhello\r\n--XyZ--\r\n'
    )
    out = scrub.body(multipart, "")
    assert "mp-secret-123" not in out and "hello" in out and f"\r\n\r\n{REDACTED}\r\n" in out
    assert scrub.body(multipart.encode(), "multipart/form-data") == out.encode()
    assert scrub.body(b"", "") == b"" and scrub.body(None, "") is None
    binary = b"\xff\xfe password=x"
    assert scrub.body(binary, "") == binary
    assert scrub.body("plain text", "") == "plain text"


def test_vcr_request_and_response() -> None:
    scrub = scrubber()
    req = request(
        "https://h/p?token=tok-abcdefgh",
        body='{"q": "tok-abcdefgh"}',
        headers={
            "X-Api-Key": ["key-abcdefgh"],
            "Content-Type": "application/json",
            "X-Echo": ["key-abcdefgh"],
            "X-Other": "tok-abcdefgh",
        },  # fmt: skip
    )
    scrub.vcr_request(req)
    assert req.uri == f"https://h/p?token={REDACTED}"
    assert req.headers == {
        "X-Api-Key": REDACTED,
        "Content-Type": "application/json",
        "X-Echo": [REDACTED],
        "X-Other": REDACTED,
    }
    assert req.body == f'{{"q":"{REDACTED}"}}'
    resp = response(
        body=b'{"access_token": "issued-abcdefgh", "echo": "key-abcdefgh"}',
        headers={"Set-Cookie": ["c=cookie-abcdefgh"], "X-Echo": ["tok-abcdefgh"]},
    )
    scrub.vcr_response(resp)
    assert resp["headers"] == {"Set-Cookie": [REDACTED], "X-Echo": [REDACTED]}
    assert json.loads(resp["body"]["string"]) == {"access_token": REDACTED, "echo": REDACTED}
    assert isinstance(resp["body"]["string"], bytes)
    assert "issued-abcdefgh" in scrub.seen
    text = response(body='{"plain": "text"}')
    assert scrub.vcr_response(text)["body"]["string"] == '{"plain": "text"}'
    zipped = gzip.compress(b"tok-abcdefgh", mtime=0)
    out = scrub.vcr_response(response(body=zipped))["body"]["string"]
    assert gzip.decompress(out) == REDACTED.encode()
    assert scrub.vcr_response({"headers": {}, "body": {}}) == {"headers": {}, "body": {}}


def test_known_secrets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "env-secret-123")
    assert "env-secret-123" in Scrubber().seen
    assert "env-secret-123" not in Scrubber(known=()).seen


def test_find_secrets() -> None:
    scrub = scrubber()
    interactions = [
        (request("https://bob:pw@h/p?api_key=abcdef&q=1"), response()),
        (request("https://REDACTED@h/p?api_key=REDACTED&api_key="), response()),
        (request("https://h/", headers={"Authorization": ["Bearer x"]}), response()),
        (request("https://h/", headers={"Authorization": REDACTED}), response()),
        (request("https://h/"), response(headers={"Set-Cookie": ["a=b"]})),
        (request("https://h/", body="user=u&password=pw123"), response()),
        (request("https://h/", body='{"token": "t"}'), response()),
        (request("https://h/"), response(body=b"key sk-abcdefghijklmnopqrstu end")),
        (request("https://h/", body=gzip.compress(b'{"secret": "z"}', mtime=0)), response()),
    ]
    found = find_secrets(interactions, scrub)
    expected = [
        "interaction 0: credentials in the URL",
        "interaction 0: query parameter api_key=abcd…",
        "interaction 2: request header Authorization",
        "interaction 4: response header Set-Cookie",
        "interaction 5: request body has a secret-named field",
        "interaction 5: request body field password=pw12…",
        "interaction 6: request body has a secret-named field",
        "interaction 7: response body contains a token-like value sk-a…",
        "interaction 8: request body has a secret-named field",
    ]
    for line in expected:
        assert line in found, line
    assert not [line for line in found if line.startswith(("interaction 1:", "interaction 3:"))]
    assert find_secrets([(request("https://h/?password=ab"), response())], scrub) == [
        "interaction 0: query parameter password=…"
    ]


def test_url_secrets_with_an_at_in_the_userinfo() -> None:
    assert url_secrets("https://a@b:pw-long-12@host/") == {"pw-long-12", "a@b:pw-long-12"}


def test_secrets_in_play_joins_environment_and_urls() -> None:
    environ = {"API_TOKEN": "env-secret-1", "SVC": "https://h/?k=url-secret-1"}
    assert secrets_in_play(environ, ["https://h/?k=arg-secret-1"]) == {
        "env-secret-1",
        "url-secret-1",
        "arg-secret-1",
    }


def test_a_secret_of_exactly_the_minimum_length_is_kept() -> None:
    assert ValueRedactor(["exactly8"]).secrets == {"exactly8"}


def test_gzip_output_is_deterministic() -> None:
    redactor = ValueRedactor([SECRET])
    out = redactor.data(gzip.compress(f"in {SECRET} zip".encode(), mtime=0))
    assert out[4:8] == b"\0\0\0\0"  # mtime 0: the same bytes on every run


def stable_span(prefix: int, length: int) -> tuple[int, int]:
    """The base64 characters of a blob that depend on the secret's bytes alone (whole 3-byte
    groups inside the secret): worked out from the base64 layout, not from the redactor."""
    first_group = -(-prefix // 3)
    end_group = (prefix + length) // 3
    return 4 * first_group, 4 * end_group


@pytest.mark.parametrize("prefix", range(6))
@pytest.mark.parametrize("suffix", range(1, 4))
def test_exactly_the_secret_dependent_characters_are_redacted(prefix: int, suffix: int) -> None:
    redactor = ValueRedactor([SECRET])
    blob = b64(b"\xfb" * prefix + SECRET.encode() + b"\xff" * suffix)
    start, end = stable_span(prefix, len(SECRET))
    assert redactor.text(blob) == blob[:start] + REDACTED + blob[end:]


def test_scan_labels_plugins_and_bodies_it_cannot_read() -> None:
    hex_token = "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    found = scan(
        [(request("https://h/"), response(headers={"X-Sig": [f"v {hex_token}"]}))], REDACTED
    )
    assert [(f.where, f.kind) for f in found] == [
        ("interaction 0 response header X-Sig", "Hex High Entropy String")
    ]
    unreadable = [
        b"\x1f\x8b not gzip at all",
        gzip.compress(b"x" * 100, mtime=0)[:15],  # cut short
        gzip.compress(b"x" * 100, mtime=0)[:10] + b"\xff" * 20 + b"\0" * 8,  # bad deflate
        b"\xff\xfe\xfd invalid utf-8",
    ]
    for body in unreadable:
        assert scan([(request("https://h/", body=body), response())], REDACTED) == []
    long_line = "x" * 5000 + f' password = "{hex_token}"'
    assert scan([(request("https://h/", body=long_line), response())], REDACTED) == []


def test_scrubbing_keeps_what_is_not_secret_exactly() -> None:
    """Blank query and form values, a query without secrets and field order are kept: the
    scrubbed request is still the request that was made, only its secrets replaced."""
    scrub = scrubber()
    assert scrub.url("https://h/p?a=&token=tok-abcdefgh&b=1") == (
        f"https://h/p?a=&token={REDACTED}&b=1"
    )
    assert scrub.body("a=&password=hunter2-long", "") == f"a=&password={REDACTED}"
    assert scrub.body("a=&password=hunter2-long", "application/x-www-form-urlencoded") == (
        f"a=&password={REDACTED}"
    )
    assert scrub.body("x y=1", "APPLICATION/X-WWW-FORM-URLENCODED") == "x y=1"
    assert scrub.body("x y=1", "application/x-www-form-urlencoded") == "x+y=1"
    assert scrub.body("x y=1", "application/json") == "x y=1"


def test_credentials_in_the_userinfo() -> None:
    scrub = scrubber()
    assert scrub.url("https://bob:pa:ss-word-1@host/p") == f"https://{REDACTED}@host/p"
    assert "pa:ss-word-1" in scrub.seen and "bob" not in scrub.seen
    scrub = scrubber()
    assert scrub.url("https://a@b:pass-word-2@host/") == f"https://{REDACTED}@host/"
    assert "pass-word-2" in scrub.seen
    scrub = scrubber()
    scrub.url("https://only-user-token@host/")
    assert "only-user-token" in scrub.seen


def test_multipart_secret_is_remembered_and_types_match_case() -> None:
    scrub = scrubber()
    multipart = (
        '--XyZ\r\nContent-Disposition: form-data; name="token"\r\n\r\nmp-secret-123\r\n--XyZ--\r\n'
    )
    scrub.body(multipart, "")
    assert "mp-secret-123" in scrub.seen
    assert scrub.redact_seen("echo mp-secret-123") == f"echo {REDACTED}"
    body = 'name="token"\r\n\r\nmp-secret-456\r\n--B'
    content = "Content-Disposition: form-data; " + body
    assert scrub.body(content, "multipart/form-data") != content
    assert scrubber().body(content, "MULTIPART/form-data") == content  # types are lowercase
    assert scrub.body('{"token": "t"}', "JSON") == '{"token":"t"}'.replace('"t"', f'"{REDACTED}"')


def test_header_names() -> None:
    scrub = scrubber()
    assert scrub.is_secret_header("X-Password")
    assert not scrub.is_secret_header("x-xpassword")
    assert scrub.is_secret_header("Foo-Subscription-Key")
    assert not scrub.is_secret_header("Foo-Subscription-Keys")
    assert scrub.is_secret_name("authToken") and not scrub.is_secret_name("auth_Tokens")
    assert not scrub.is_secret_name("myapiKeyring")


def test_secret_name_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rlenv.world.scrub._NAMES_KEPT", 2)
    scrub = scrubber()
    assert scrub.is_secret_name("token") and not scrub.is_secret_name("query")
    assert not scrub.is_secret_name("other")
    assert scrub._secret_names == {"token": True, "query": False}


def test_find_secrets_details() -> None:
    scrub = scrubber()
    interactions = [
        (request("https://h/?password="), response()),
        (request("https://h/", headers={"X-Api-Key": [REDACTED, "leak"]}), response()),
        (request("https://h/", headers={"Authorization": [REDACTED]}), response()),
        (request("https://h/"), response(headers={"Set-Cookie": [REDACTED]})),
        (request("https://h/", body="a=&password="), response()),
        (request("https://h/", body=b"\x1f\x8b broken gzip"), response()),
        (request("https://h/", body=b"\xff\xfe ghp_abcdefghijklmnopqrstuvwxyz"), response()),
        (request("https://h/", body='  {"secret": "v"}'), response()),
        (request("https://h/", body="[1, 2]"), response(body='{"x": 1}')),
    ]
    found = find_secrets(interactions, scrub)
    assert "interaction 1: request header X-Api-Key" in found
    assert "interaction 6: request body contains a token-like value ghp_…" in found
    assert "interaction 7: request body has a secret-named field" in found
    for number in (0, 2, 3, 5, 8):
        assert not [line for line in found if line.startswith(f"interaction {number}:")], number


def test_vcr_request_reads_the_content_type_header() -> None:
    for value in ("application/x-www-form-urlencoded", ["application/x-www-form-urlencoded"]):
        req = request("https://h/", body="x y=1&token=abcdefgh1", headers={"Content-Type": value})
        scrubber().vcr_request(req)
        assert req.body == f"x+y=1&token={REDACTED}"
    untyped = request("https://h/", body="x y=1&token=abcdefgh1", headers={"Accept": "*/*"})
    scrubber().vcr_request(untyped)
    assert untyped.body == "x y=1&token=abcdefgh1"


def test_vcr_response_json_is_compact_and_sorted() -> None:
    resp = response(body='{"token": "t", "a": 1}')
    scrubber().vcr_response(resp)
    assert resp["body"]["string"] == f'{{"a":1,"token":"{REDACTED}"}}'


def test_hidden_values_split_on_separators_and_basic_passwords() -> None:
    scrub = scrubber()
    scrub.vcr_response(response(headers={"Set-Cookie": ["sid=first-val-1,other-val-2"]}))
    assert {"first-val-1", "other-val-2"} <= scrub.seen
    basic = b64(b"alice:pass:word-9")
    scrub.vcr_request(request("https://h/", headers={"Authorization": basic}))
    assert "pass:word-9" in scrub.seen


def test_camel_case_names_and_short_masks() -> None:
    assert scrubber().is_secret_name("myToken") and scrubber().is_secret_name("clientSecret")
    found = find_secrets([(request("https://h/?password=abcd"), response())], scrubber())
    assert found == ["interaction 0: query parameter password=…"]
