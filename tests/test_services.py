"""The spec's `services:` (issue 18 item 1): started by `rlenv record` under the frozen clock,
stopped as a whole process group even when recording fails, and a one-line warning when a
recorded response carries a date other than the frozen one."""

from __future__ import annotations

import os
import time
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import yaml

from rlenv.errors import SpecError
from rlenv.spec import load_spec
from rlenv.world.services import dated_responses
from tests.conftest import EnvBuilder, cli, require_tool

# A service that starts a helper (same process group) and notes both pids where it is told.
SERVICE = """
import os, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def do_GET(self):
        body = b'{"ok": true, "clock": "%d"}' % int(time.time())
        self.send_response(200)   # Date: from this process's clock
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.path.join(os.environ["PIDS"], os.environ["WHO"]), "w") as out:
    out.write(f"{os.getpid()} {helper.pid}")
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""

TOOL = """
import httpx

def call(args, ctx):
    return httpx.get(ctx.services["clock"] + "/now").json()

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "call", "arguments": "{}"}}]}
    return "done"
"""


def _service(name: str, pids: Path, *prefix: str, ready: dict | None = None) -> dict:
    return {
        "name": name,
        "command": [*prefix, "python", "service.py", "{port}"],
        "ready": ready or {"http": "/health", "timeout_s": 10},
        "env": {"PIDS": str(pids), "WHO": name},
    }


def _spec(env_builder: EnvBuilder, services: list[dict], **extra: object) -> Path:
    spec = env_builder.write(
        TOOL,
        inputs=[{"id": "a", "prompt": "now?", "answer": "done"}],
        tools=[{"name": "call", "function": "MOD:call", "cassette": {"path": "call.yaml"}}],
        services=services,
        verifiers=[{"type": "regex", "pattern": "done"}],
        rollouts=1,
        **extra,
    )
    (spec.parent / "service.py").write_text(SERVICE)
    return spec


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes (its parent has not reaped it yet)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _pids(pids: Path, name: str) -> list[int]:
    return [int(pid) for pid in (pids / name).read_text().split()]


def _all_dead(pids: list[int]) -> bool:
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # the kernel delivers SIGKILL asynchronously
    return not any(_alive(pid) for pid in pids)


def test_service_group_is_stopped_after_recording(env_builder: EnvBuilder, tmp_path: Path) -> None:
    require_tool("faketime")
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = _spec(env_builder, [_service("clock", pids)])
    result = cli("record", str(spec))
    assert result.returncode == 0, result.stderr
    assert "service clock: started under the frozen clock" in result.stdout
    assert "warning" not in result.stderr, result.stderr
    server, helper = _pids(pids, "clock")
    assert _all_dead([server, helper]), "the service or its helper outlived `rlenv record`"
    cassette = yaml.safe_load((spec.parent / "call.yaml").read_text())
    (interaction,) = cassette["interactions"]
    assert interaction["request"]["uri"] == "http://clock.rlenv.internal/now"
    frozen = int(datetime(2024, 3, 1, 12, tzinfo=UTC).timestamp())
    assert interaction["response"]["body"]["string"] == f'{{"ok": true, "clock": "{frozen}"}}'
    headers = {name.lower(): value for name, value in interaction["response"]["headers"].items()}
    assert headers["date"] == ["Fri, 01 Mar 2024 12:00:00 GMT"]


def test_a_service_that_never_gets_ready_stops_the_ones_already_started(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    require_tool("faketime")
    pids = tmp_path / "pids"
    pids.mkdir()
    broken = {"name": "broken", "command": ["python", "-c", "raise SystemExit('no config')"]}
    spec = _spec(env_builder, [_service("clock", pids), broken])
    result = cli("record", str(spec))
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "service 'broken' exited with code 1 before it was ready: no config" in line
    assert "Traceback" not in result.stderr
    assert _all_dead(_pids(pids, "clock"))
    assert not (spec.parent / "call.yaml").exists(), "nothing is written when recording fails"


def test_readiness_timeout_and_a_failing_run_also_stop_the_service(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    require_tool("faketime")
    pids = tmp_path / "pids"
    pids.mkdir()
    never = _service("clock", pids, ready={"http": "/health-never", "timeout_s": 1})
    never["command"] = ["python", "-c", "import time; time.sleep(600)"]
    spec = _spec(env_builder, [never])
    result = cli("record", str(spec))
    assert result.returncode == 1
    assert "service 'clock' not ready after 1 s (GET /health-never on port" in result.stderr

    # the service is up, then the run itself fails (an unknown policy): still stopped
    spec = _spec(env_builder, [_service("clock", pids)])
    result = cli("record", str(spec), "--model", "python:no_such_module:policy")
    assert result.returncode != 0, result.stderr
    assert _all_dead(_pids(pids, "clock"))


def test_record_warns_when_a_response_carries_the_real_date(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A service that escapes the frozen clock (here: libfaketime unloaded) answers with
    today's Date header: `record` still writes the cassette, and says so in one line."""
    require_tool("faketime")
    pids = tmp_path / "pids"
    pids.mkdir()
    escaped = _service("clock", pids, "env", "-u", "LD_PRELOAD")
    spec = _spec(env_builder, [escaped])
    result = cli("record", str(spec))
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert "1 recorded response carries a date other than the frozen 2024-03-01" in line
    assert "tool 'call' interaction 0, Date header" in line
    assert (spec.parent / "call.yaml").is_file()


def test_dated_responses_finds_headers_and_body_dates() -> None:
    frozen = datetime(2025, 3, 14, 9, tzinfo=UTC)
    today = date(2026, 11, 23)
    responses = [
        {"headers": {"Date": ["Fri, 14 Mar 2025 09:00:00 GMT"]}, "body": {"string": "{}"}},
        {"headers": {"date": ["Mon, 23 Nov 2026 10:00:00 GMT"]}, "body": {"string": "{}"}},
        {"headers": {}, "body": {"string": b'{"date": "2026-11-23"}'}},
        {"headers": {}, "body": {"string": '{"date": "2025-03-14", "born": "1970-01-01"}'}},
    ]
    findings = dated_responses("t", responses, frozen, today, first=5)
    assert [(f.interaction, f.what.split()[0]) for f in findings] == [(6, "Date"), (7, "body")]
    assert dated_responses("t", responses[2:], frozen, frozen.date()) == []


@pytest.mark.parametrize(
    ("service", "message"),
    [
        ({"name": "Search", "command": ["x"]}, "services[0].name"),
        ({"name": "s", "command": []}, "services[0].command"),
        ({"name": "s", "command": ["x"], "ready": {}}, "ready needs exactly one of"),
        ({"name": "s", "command": ["x"], "ready": {"http": "health"}}, "ready.http"),
        ({"name": "s", "command": ["x"], "port": 8080}, "services[0].port: unknown key"),
    ],
)
def test_bad_services_block_is_one_line_naming_the_field(
    env_builder: EnvBuilder, service: dict, message: str
) -> None:
    spec = env_builder.write("", services=[service])
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_spec(spec)
    result = cli("validate", str(spec))
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_libfaketime_is_refused_before_anything_starts(
    env_builder: EnvBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlenv.sandbox
    from rlenv.errors import RunFailed
    from rlenv.recording import record

    pids = tmp_path / "pids"
    pids.mkdir()
    spec = _spec(env_builder, [_service("clock", pids)])
    monkeypatch.setattr(rlenv.sandbox, "faketime_env", lambda *args, **kwargs: {})
    with pytest.raises(RunFailed, match="libfaketime is not installed"):
        record(spec)
    assert not (pids / "clock").exists()
