"""A new env of another kind, built the way README's "A new env with a service" says (issue 18).

An exchange-rate and date API behind a bearer key (a loopback HTTP service written below) goes
`rlenv init` -> `services:` block -> `record` (the service started by record under the frozen
clock; recorded twice on different ports -> byte-identical cassettes) -> `validate` -> `run`
-> `verify` -> `report` -> `compare`. Only the CLI is used, as a user would.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import yaml

from tests.conftest import cli, readme_figures, require_tool

KEY = "rk-live-5b1e0c9d8a7f6e4d3c2b1a09"
FROZEN_DAY = "2025-03-14"  # a Friday

SERVICE = '''
"""Exchange rates and today's date behind a bearer key (stdlib only): GET /health (no key),
GET /rate?base=EUR&quote=USD, GET /today. Listens on 127.0.0.1:<argv[1]>."""
import json
import os
import sys
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PER_EUR = {"EUR": 1.0, "USD": 1.0842, "GBP": 0.8391, "JPY": 163.21, "CHF": 0.9587}
KEY = os.environ["RATES_API_KEY"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, obj):
        body = json.dumps(obj, sort_keys=True).encode()
        self.send_response(status)  # with a Date: header from this process's clock
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        if url.path == "/health":
            return self.send(200, {"ok": True})
        if self.headers.get("Authorization") != "Bearer " + KEY:
            return self.send(401, {"error": "missing or wrong bearer key"})
        today = date.today()
        if url.path == "/today":
            return self.send(200, {"date": today.isoformat(), "weekday": today.strftime("%A")})
        if url.path == "/rate" and {"base", "quote"} <= set(query):
            rate = round(PER_EUR[query["quote"]] / PER_EUR[query["base"]], 4)
            return self.send(200, {**query, "rate": rate, "date": today.isoformat()})
        return self.send(404, {"error": "not found"})


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
if os.environ.get("RATES_PORT_LOG"):  # the test's proof that two recordings used two ports
    with open(os.environ["RATES_PORT_LOG"], "a") as log:
        log.write(f"{server.server_address[1]}\\n")
server.serve_forever()
'''

TOOLS = '''
"""Tools of the rates env: each reads the service's logical base URL from ctx.services."""
import os
from typing import Any

import httpx


def _get(ctx: Any, path: str, params: dict[str, str] | None = None) -> Any:
    key = os.environ.get("RATES_API_KEY", "")
    response = httpx.get(
        ctx.services["rates"] + path,
        params=params,
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


def rate(args: dict[str, Any], ctx: Any) -> Any:
    return _get(ctx, "/rate", {"base": args["base"], "quote": args["quote"]})


def today(args: dict[str, Any], ctx: Any) -> Any:
    return _get(ctx, "/today")
'''

POLICIES = '''
"""Policies of the rates env: one tool call, then the answer read from its result."""
import json
import re
from typing import Any


def baseline(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> Any:
    question = next(m["content"] for m in messages if m["role"] == "user")
    if messages[-1]["role"] == "tool":
        result = json.loads(messages[-1]["content"])
        if "rate" in result:
            return str(result["rate"])
        return result["weekday"] if "day of the week" in question else result["date"]
    pair = re.findall(r"\\b[A-Z]{3}\\b", question)  # "How many QUOTE is 1 BASE?"
    if len(pair) == 2:
        call = {"name": "rate", "arguments": json.dumps({"base": pair[1], "quote": pair[0]})}
    else:
        call = {"name": "today", "arguments": "{}"}
    return {"content": None, "tool_calls": [{"id": "c0", "type": "function", "function": call}]}


def null(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> str:
    return "I don't know."
'''

INPUTS = [
    {"id": "eur-usd", "prompt": "How many USD is 1 EUR?", "answer": "1.0842"},
    {"id": "usd-jpy", "prompt": "How many JPY is 1 USD?", "answer": "150.535"},
    {"id": "gbp-chf", "prompt": "How many CHF is 1 GBP?", "answer": "1.1425"},
    {"id": "date", "prompt": "What is today's date?", "answer": FROZEN_DAY},
    {"id": "weekday", "prompt": "What day of the week is it today?", "answer": "Friday"},
]

SERVICES_BLOCK = {
    "services": [
        {
            "name": "rates",
            "command": ["python", "rates_env/service.py", "{port}"],
            "ready": {"http": "/health", "timeout_s": 10},
        }
    ]
}

TOOL_SPECS = [
    {
        "name": "rate",
        "description": "Exchange rate: how many `quote` for one `base` (ISO 4217 codes).",
        "parameters": {
            "type": "object",
            "properties": {"base": {"type": "string"}, "quote": {"type": "string"}},
            "required": ["base", "quote"],
            "additionalProperties": False,
        },
        "function": "rates_env.tools:rate",
        "cassette": {"path": "../fixtures/rates/cassettes/rate.yaml"},
    },
    {
        "name": "today",
        "description": "Today's date and weekday.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        "function": "rates_env.tools:today",
        "cassette": {"path": "../fixtures/rates/cassettes/today.yaml"},
    },
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build_env(root: Path) -> Path:
    """`rlenv init rates`, then the edits README lists: service, tools, inputs, spec blocks."""
    created = cli("init", "rates", cwd=root)
    assert created.returncode == 0, created.stderr
    package = root / "envs" / "rates_env"
    (package / "service.py").write_text(SERVICE.lstrip())
    (package / "tools.py").write_text(TOOLS.lstrip())
    (package / "policies.py").write_text(POLICIES.lstrip())
    inputs = root / "fixtures" / "rates" / "inputs.jsonl"
    inputs.write_text("".join(json.dumps(record) + "\n" for record in INPUTS))
    spec_path = root / "envs" / "rates.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["time"] = f"{FROZEN_DAY}T09:30:00+00:00"
    spec["inputs"]["sha256"] = _sha256(inputs)
    spec["tools"] = TOOL_SPECS
    spec.update(SERVICES_BLOCK)
    spec["verifiers"] = [{"name": "answer", "type": "exact_match", "expected_field": "answer"}]
    spec["rollouts"] = 1
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec_path


def _record(root: Path, spec: Path, port_log: Path) -> dict:
    env = {"RATES_API_KEY": KEY, "RATES_PORT_LOG": str(port_log)}
    result = cli("record", str(spec), "--mode", "all", "--json", cwd=root, env=env)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr  # dates are the frozen day's
    return json.loads(result.stdout)


def test_service_env_from_init_to_compare(tmp_path: Path) -> None:
    require_tool("faketime")
    readme_figures(r"## A new env with a service")
    root = tmp_path / "project"
    root.mkdir()
    spec = _build_env(root)
    cassettes = root / "fixtures" / "rates" / "cassettes"
    port_log = tmp_path / "ports.log"

    first = _record(root, spec, port_log)
    assert first["services"] == {"rates": "http://rates.rlenv.internal"}
    assert {name: info["interactions"] for name, info in first["cassettes"].items()} == {
        "rate": 3,
        "today": 1,  # both date questions make the same request
    }
    recorded = {path.name: path.read_bytes() for path in sorted(cassettes.iterdir())}
    for name, data in recorded.items():
        text = data.decode()
        assert KEY not in text, f"{name}: the bearer key reached the cassette"
        assert "http://rates.rlenv.internal/" in text and "127.0.0.1" not in text, name
        assert FROZEN_DAY in text, f"{name}: the service did not run under the frozen clock"
    # pin what record printed (README: put each cassette's sha256 in the spec)
    document = yaml.safe_load(spec.read_text())
    for tool in document["tools"]:
        tool["cassette"]["sha256"] = first["cassettes"][tool["name"]]["sha256"]
    spec.write_text(yaml.safe_dump(document, sort_keys=False))

    # record again while the first port is taken: another port, the same bytes
    first_port = int(port_log.read_text().split()[0])
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first_port))
        second = _record(root, spec, port_log)
    ports = [int(port) for port in port_log.read_text().split()]
    assert len(ports) == 2 and ports[0] != ports[1]
    assert {path.name: path.read_bytes() for path in sorted(cassettes.iterdir())} == recorded
    assert second["spec_updated"] is False

    # replay needs neither the service, nor its key, nor a host variable
    validated = cli("validate", str(spec), cwd=root)
    assert validated.returncode == 0, validated.stderr
    runs = root / "runs"
    baseline = cli("run", str(spec), "--out", str(runs / "baseline"), "--json", cwd=root)
    assert baseline.returncode == 0, baseline.stderr
    summary = json.loads(baseline.stdout)
    assert summary["pass_rate"]["value"] == 1.0, summary
    assert summary["fixtures"] == {"hit": 5}
    model = "python:rates_env.policies:null"
    null = cli("run", str(spec), "--model", model, "--out", str(runs / "null"), cwd=root)
    assert null.returncode == 0, null.stderr
    verified = cli("verify", str(spec), "--runs", "2", cwd=root)
    assert verified.returncode == 0 and verified.stdout.startswith("identical"), verified.stdout
    reported = cli("report", str(runs / "baseline"), cwd=root)
    assert reported.returncode == 0, reported.stderr
    assert (runs / "baseline" / "report.html").is_file()
    compared = cli("compare", str(runs / "null"), str(runs / "baseline"), "--json", cwd=root)
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["fingerprints_match"] is True
