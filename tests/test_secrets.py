"""Secrets by value: a catalog of secret forms recorded through `rlenv record` against a real
loopback server, then the cassette searched for each secret (raw, URL-encoded, base64, inside
gzip); `rlenv validate` refusing secrets planted straight into a cassette (detect-secrets)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import yaml

from tests.conftest import EnvBuilder, cli, read_jsonl
from tests.secret_oracle import readable


def literal(form: str) -> str:
    """A secret the tool code holds itself (not in the environment): found by name only."""
    return f"lit-{form}-Q7x9Z2pLmK"


# secrets the environment holds (F_<FORM>_SECRET or a tool URL): found by value
ENV_SECRETS = {
    "path_secret": "pth-Vb81Kq0Zr4Lw",
    "query_ordinary_name": "qon-Hn3Ws9Tx2Qe",
    "query_special_chars": "p@ss/w+rd=Zz9&x y%Qm",
    "header_base64": "hb64-Jk38Fq02Lz",
    "body_base64_offset": "bbo-Wm4Rt7Yx1Cd",
    "plain_body": "plb-Ns6Ue2Gh8Kp",
    "xml_body": "xml-Aq9Ze5Vb3Tn",
    "multipart_ordinary": "mpo-Lr2Xc7Dw4Fj",
    "gzip_response": "gzr-Pt5Hy1Mk6Sb",
    "json_url_encoded": "j/u+e=Rk4&Qz8 Wc",
    "callback_header": "cbh-Ue7Np3Jd9Xa",
    "tool_base_url_query": "tbq-Gs2Lk8Vm5Rw",
    "tool_base_url_userinfo": "tbu-Ky6Bq1Zn4Ht",
}

FORMS: dict[str, str] = {
    # found by name (the tool's own secret, not in the environment)
    "bearer": 'get(B + "/a", headers={"Authorization": "Bearer " + s})',
    "x_api_key": 'get(B + "/b", headers={"X-Api-Key": s})',
    "x_custom_token": 'get(B + "/b", headers={"X-Custom-Token": s})',
    "cookie": 'get(B + "/c", headers={"Cookie": "sid=" + s})',
    "query_api_key": 'get(B + "/d", params={"q": "x", "api_key": s})',
    "query_apikey": 'get(B + "/d", params={"q": "y", "apikey": s})',
    "query_authtoken": 'get(B + "/d", params={"q": "z", "authToken": s})',
    "json_password": 'post(B + "/e", json={"q": "x", "password": s})',
    "json_nested_secret": 'post(B + "/e", json={"q": "y", "auth": {"client_secret": s}})',
    "json_secret_access_key": 'post(B + "/e", json={"q": "z", "secretAccessKey": s})',
    "json_api_key_space": 'post(B + "/e", json={"q": "w", "api key": s})',
    "json_jwt": 'post(B + "/e", json={"q": "v", "jwt": s})',
    "form_token": 'post(B + "/f", data={"q": "x", "token": s})',
    "url_credentials": 'get("http://user:" + s + "@" + HOST + "/g")',
    "basic_auth": 'get(B + "/h", auth=("user", s))',
    "private_token": 'get(B + "/i", headers={"PRIVATE-TOKEN": s})',
    "x_service_auth": 'get(B + "/i", headers={"X-Service-Auth": s})',
    "subscription_key": 'get(B + "/i", headers={"Ocp-Apim-Subscription-Key": s})',
    "amz_security_token": 'get(B + "/i", headers={"X-Amz-Security-Token": s})',
    "multipart_named": 'post(B + "/m", data={"api_key": s}, files={"f": ("a.txt", b"hi")})',
    "response_issued_token": 'get(B + "/issue")',
    "response_set_cookie": 'get(B + "/cookie")',
    "cross_call_a": 'get(B + "/login", headers={"Authorization": "Bearer " + s})',
    "cross_call_b": 'get(B + "/whoami")',
    # found by value (the environment holds them)
    "path_secret": 'get(B + "/users/" + s + "/items")',
    "query_ordinary_name": 'get(B + "/d", params={"q": s})',
    "query_special_chars": 'get(B + "/d", params={"q": s})',
    "header_base64": 'get(B + "/j", headers={"X-Blob": b64(s)})',
    "body_base64_offset": 'post(B + "/k", content="data:" + b64("xy" + s + "tail"))',
    "plain_body": 'post(B + "/k", content="note " + s, headers={"Content-Type": "text/plain"})',
    "xml_body": 'post(B + "/x", content="<r><v>" + s + "</v></r>",'
    ' headers={"Content-Type": "application/xml"})',
    "multipart_ordinary": 'post(B + "/m", data={"comment": s}, files={"f": ("b.txt", b"yo")})',
    "gzip_response": 'get(B + "/gzip", headers={"X-Trace": s})',
    "json_url_encoded": 'post(B + "/e", json={"note": quote(s, safe="")})',
    "callback_header": 'get(B + "/l", headers={"X-Callback": "http://h/cb?sig=" + quote(s)})',
    "tool_base_url_query": 'get(os.environ["TOOL_URL_QUERY"])',
    "tool_base_url_userinfo": 'get(os.environ["TOOL_URL_USERINFO"])',
}


def secret_of(form: str) -> str:
    if form.startswith("cross_call"):
        return literal("cross_call")
    return ENV_SECRETS.get(form) or literal(form)


TOOL = """
import base64, os
from urllib.parse import quote
import httpx

B = os.environ["RLENV_TEST_ECHO_URL"]
HOST = B.split("://", 1)[1]
CLIENT = httpx.Client(timeout=10)
get, post = CLIENT.get, CLIENT.post

def b64(text):
    return base64.b64encode(text.encode()).decode()

def secret(form):
    if form.startswith("cross_call"):
        return "lit-cross_call-Q7x9Z2pLmK"
    return os.environ.get("F_" + form.upper() + "_SECRET") or "lit-" + form + "-Q7x9Z2pLmK"

def call(args, ctx):
    form = args["form"]
    s = secret(form)
    response = FORMS[form](s)
    return {"status": response.status_code, "length": len(response.content)}

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "call",
                "arguments": '{"form": "%s"}' % messages[-1]["content"]}}]}
    return "done"

FORMS = {
"""


def tool_code() -> str:
    body = "".join(f"    {form!r}: lambda s: {code},\n" for form, code in FORMS.items())
    return TOOL + body + "}\n"


class Echo(BaseHTTPRequestHandler):
    """Echoes the request (path, headers, body) as JSON; some paths hand out secrets."""

    last_bearer = ""

    def _reply(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        auth = self.headers.get("authorization") or ""
        extra: list[tuple[str, str]] = []
        if self.path == "/login":
            Echo.last_bearer = auth.split(" ", 1)[-1]
        echo: dict[str, Any] = {
            "path": self.path,
            "headers": dict(self.headers.items()),
            "body": body.decode("latin-1"),
        }
        if self.path == "/whoami":
            echo = {"me": Echo.last_bearer}
        elif self.path == "/issue":
            echo = {"access_token": literal("response_issued_token"), "n": 1}
        elif self.path == "/cookie":
            extra.append(("Set-Cookie", f"session={literal('response_set_cookie')}; HttpOnly"))
            echo = {"ok": True}
        payload = json.dumps(echo).encode()
        if self.path == "/gzip":
            payload = gzip.compress(payload)
            extra.append(("Content-Encoding", "gzip"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _reply

    def log_message(self, *args: object) -> None:
        return None


def plaintext(path: Path) -> str:
    """The cassette file's text plus every body decoded (base64 binaries, gzip)."""
    text = path.read_text()
    parts = [text]
    for interaction in yaml.safe_load(text)["interactions"]:
        for body in (
            interaction["request"].get("body"),
            (interaction["response"].get("body") or {}).get("string"),
        ):
            if isinstance(body, bytes):
                if body[:2] == b"\x1f\x8b":
                    body = gzip.decompress(body)
                parts.append(body.decode("latin-1"))
    return "\n".join(parts)


def forms_of(secret: str) -> list[str]:
    raw = secret.encode()
    return [
        secret,
        quote(secret, safe=""),
        quote_plus(secret),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One recording of every form (one record run), then one replay with the server gone."""
    tmp_path = tmp_path_factory.mktemp("secrets")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    builder = EnvBuilder(tmp_path / "env")
    spec = builder.write(
        tool_code(),
        inputs=[{"id": form, "prompt": form, "answer": "done"} for form in FORMS],
        tools=[{"name": "call", "function": "MOD:call", "cassette": {"path": "call.yaml"}}],
        verifiers=[{"type": "regex", "pattern": "done"}],
        rollouts=1,
    )
    env = {"RLENV_TEST_ECHO_URL": url}
    for form, value in ENV_SECRETS.items():
        env[f"F_{form.upper()}_SECRET"] = value
    env["TOOL_URL_QUERY"] = f"{url}/svc?q2=x&code={quote(ENV_SECRETS['tool_base_url_query'])}"
    env["TOOL_URL_USERINFO"] = (
        f"http://bob:{ENV_SECRETS['tool_base_url_userinfo']}@{url.split('://', 1)[1]}/svc"
    )
    # tool base URLs are not secret-named: their secrets are known only as URL parts
    del env["F_TOOL_BASE_URL_QUERY_SECRET"], env["F_TOOL_BASE_URL_USERINFO_SECRET"]
    try:
        result = cli("record", str(spec), env=env)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    cassette = spec.parent / "call.yaml"
    replay = cli("run", str(spec), "--out", str(tmp_path / "replay"), "--json", env=env)
    records = (
        {r["input_id"]: r for r in read_jsonl(tmp_path / "replay" / "results.jsonl")}
        if replay.returncode == 0
        else {}
    )
    return {"text": plaintext(cassette), "replay": replay, "records": records}


@pytest.mark.parametrize("form", list(FORMS))
def test_recorded_cassette_holds_no_secret(recorded: dict[str, Any], form: str) -> None:
    secret = secret_of(form)
    leaked = [variant for variant in forms_of(secret) if variant in recorded["text"]]
    assert not leaked, f"{form}: {leaked}"
    # decoded, not listed: base64 at any byte offset of a blob (issue 27: forms_of searched
    # offset 0 only, so the base64-at-an-offset case could not fail)
    assert not readable(recorded["text"], secret), f"{form}: readable in the cassette"


def test_catalog_is_large_enough() -> None:
    assert len(FORMS) >= 30


@pytest.mark.parametrize("form", ["multipart_named", "multipart_ordinary", "path_secret", "bearer"])
def test_scrubbed_forms_replay(recorded: dict[str, Any], form: str) -> None:
    assert recorded["replay"].returncode == 0, recorded["replay"].stderr
    record = recorded["records"][form]
    assert record["tool_calls"][0]["fixture"] == "hit", (form, record.get("error"))


# ---- validate: secrets planted straight into a cassette ------------------------------------


def _interaction(
    uri: str = "http://api.test/a",
    *,
    method: str = "GET",
    headers: dict[str, list[str]] | None = None,
    body: Any = None,
    response_body: Any = '{"ok": true}',
    response_headers: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    return {
        "request": {"method": method, "uri": uri, "body": body, "headers": headers or {}},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": response_headers or {},
            "body": {"string": response_body},
        },
    }


HIGH_ENTROPY = "q8VZr2Lw7XkP4nTb9sYc3HdF6mJg1RaQ"  # base64-alphabet, 32 chars
PLANTED: dict[str, dict[str, Any]] = {
    "high_entropy_in_text_body": _interaction(response_body=f"result: {HIGH_ENTROPY}\n"),
    "hex_entropy_in_json": _interaction(
        response_body=json.dumps({"blob": "8f3a9c1e7b2d4f60a5c8e91b3d7f2a4c6e8b0d2f"})
    ),
    "secret_access_key_json": _interaction(
        method="POST", body=json.dumps({"q": 1, "secretAccessKey": "wJalrXUtnFEMIK7MDENGbPxR"})
    ),
    "private_token_header": _interaction(headers={"PRIVATE-TOKEN": ["glpat-abcDEF123456"]}),
    "x_service_auth_header": _interaction(headers={"X-Service-Auth": ["svc-abcDEF123456"]}),
    "keyword_in_xml": _interaction(response_body="<r><password>Tr0ub4dor&3horse</password></r>"),
    "multipart_password": _interaction(
        method="POST",
        headers={"Content-Type": ["multipart/form-data; boundary=xyz"]},
        body=(
            '--xyz\r\nContent-Disposition: form-data; name="password"\r\n\r\n'
            "hunter2hunter2\r\n--xyz--\r\n"
        ),
    ),
    "gzip_body_token": _interaction(
        response_body=gzip.compress(json.dumps({"v": f"key={HIGH_ENTROPY}"}).encode(), mtime=0),
        response_headers={"Content-Encoding": ["gzip"]},
    ),
    "binary_body_password": _interaction(
        response_body=b'db_password = "s3cr3tPassw0rdValue"\n\xff'
    ),
    "basic_auth_in_body": _interaction(
        response_body="Authorization: Basic dXNlcjpzM2NyM3RQYXNzdzByZA==\n"
    ),
}


def _planted_spec(builder: EnvBuilder, interactions: list[dict[str, Any]], **spec: Any) -> Path:
    builder.root.mkdir(parents=True, exist_ok=True)
    (builder.root / "leaky.yaml").write_text(
        yaml.safe_dump({"version": 1, "interactions": interactions})
    )
    return builder.write(
        "def t(args, ctx):\n    return 1\ndef policy(m, t, c):\n    return 'x'\n",
        tools=[{"name": "t", "function": "MOD:t", "cassette": {"path": "leaky.yaml"}}],
        **spec,
    )


@pytest.mark.parametrize("form", list(PLANTED))
def test_validate_refuses_planted_secret(env_builder: EnvBuilder, form: str) -> None:
    spec = _planted_spec(env_builder, [PLANTED[form]])
    result = cli("validate", str(spec))
    assert result.returncode == 2, (form, result.stdout, result.stderr)
    assert "leaky.yaml" in result.stderr and "Traceback" not in result.stderr
    # validate lists every finding, one line each, all naming the cassette (issue 18 item 4)
    lines = result.stderr.strip().splitlines()
    assert lines and all("leaky.yaml" in line for line in lines), result.stderr


def test_allow_list_by_hash_accepts_a_finding(env_builder: EnvBuilder) -> None:
    spec = _planted_spec(env_builder, [PLANTED["high_entropy_in_text_body"]])
    refused = cli("validate", str(spec))
    assert refused.returncode == 2
    digest = hashlib.sha256(HIGH_ENTROPY.encode()).hexdigest()
    assert f"sha256:{digest}" in refused.stderr, refused.stderr
    assert HIGH_ENTROPY not in refused.stderr
    spec = _planted_spec(
        env_builder,
        [PLANTED["high_entropy_in_text_body"]],
        scrub={"allow": [f"sha256:{digest}"]},
    )
    result = cli("validate", str(spec))
    assert result.returncode == 0, result.stderr


def test_allow_list_refuses_raw_values(env_builder: EnvBuilder) -> None:
    spec = _planted_spec(
        env_builder, [PLANTED["high_entropy_in_text_body"]], scrub={"allow": [HIGH_ENTROPY]}
    )
    result = cli("validate", str(spec))
    assert result.returncode == 2 and "scrub.allow" in result.stderr, result.stderr


# ---- run.json never stores a secret from --base-url ------------------------------------------


def test_run_json_strips_base_url_secrets(env_builder: EnvBuilder, chat: Any) -> None:
    server = chat()
    spec = env_builder.write("")
    password, key = "pw-Zk48Tq1Lm", "azk-Rb73Hw0Xe"
    base = server.base_url.replace("http://", f"http://user:{password}@") + f"?api-key={key}"
    out = env_builder.root.parent / "run"
    result = cli(
        "run",
        str(spec),
        "--model",
        "openai:m",
        "--base-url",
        base,
        "--out",
        str(out),
        "--limit",
        "1",
        "--rollouts",
        "1",
    )
    # the query string breaks the route (HTTP 404 on every rollout, the server echoing the URL):
    # the run exits 1 with its summary written, and no file holds a credential (the error in
    # the records and summary's errors and flags is redacted)
    assert result.returncode == 1 and "infra_errors" in result.stderr, result.stderr
    assert "REDACTED" in (out / "results.jsonl").read_text()
    for name in ("run.json", "summary.json", "results.jsonl"):
        text = (out / name).read_text()
        assert password not in text and key not in text, name
