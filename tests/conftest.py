"""Shared test helpers: build small envs in temp dirs and call the real `rlenv` entry point."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# grader and cassette-index caches of the suite live in a temp dir, never in ~/.cache
os.environ.setdefault("RLENV_CACHE_DIR", tempfile.mkdtemp(prefix="rlenv-test-cache-"))
RLENV = Path(sys.executable).parent / "rlenv"


def readme_figures(pattern: str) -> tuple[str, ...]:
    """The groups of `pattern` in README.md, whitespace collapsed (so a figure may wrap): the
    figures a test compares with the output of the command that prints them."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    found = re.search(pattern, text)
    assert found, f"README.md no longer matches {pattern!r}: update the test with the README"
    return found.groups()


def as_written(value: float, figure: str) -> str:
    """`value` rounded the way the README writes `figure` (as many decimals)."""
    decimals = len(figure.partition(".")[2])
    return f"{value:.{decimals}f}"


def in_ci() -> bool:
    """True under CI (`CI` set and not "0"/"false"): CI promises every system dependency."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(available: bool, what: str) -> None:
    """Skip the calling test when a system dependency is missing here, but fail it under CI,
    where scripts/system-deps.sh must have installed it: a missing sandbox never turns green."""
    if available:
        return
    message = f"{what} is missing here (scripts/system-deps.sh installs it)"
    if in_ci():
        pytest.fail(f"{message}; CI is set, so this is a failure, not a skip", pytrace=False)
    pytest.skip(message)


def require_tool(name: str) -> None:
    """`require` for a command on PATH (bwrap, unshare, faketime...)."""
    require(shutil.which(name) is not None, name)


def needs(available: bool, what: str) -> pytest.MarkDecorator:
    """Marker form of `require`: `@needs(probe_mechanism() != "rlimits", "bubblewrap")`."""
    return pytest.mark.system_dep(available=available, what=what)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "system_dep(available, what): skip when missing, fail under CI (see `needs`)"
    )


# The test files that take longest, longest first (`python bench/suite_time.py` lists each
# file's summed time). pyproject's addopts run `--dist loadfile --no-loadscope-reorder`: xdist
# hands whole files to its two workers in collection order, so these start first and the short
# files fill in at the end, instead of one worker finishing a long file picked last while the
# other idles. A file missing here only starts later.
LONGEST_FIRST = (
    "test_bounded_inputs.py",
    "test_serve.py",
    "test_catalog.py",
    "test_mcp_tools.py",
    "test_audit_readers.py",
    "test_audit.py",
    "test_policy_shift.py",
    "test_detection.py",
    "test_outcomes.py",
    "test_import_inspect.py",
    "test_rm.py",
    "test_openai_provider.py",
    "test_spec.py",
    "test_secrets.py",
    "test_day_one_inputs.py",
    "test_env.py",
    "test_retail_env.py",
    "test_trl.py",
    "test_serve_trl.py",
    "test_import_lm_eval.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("system_dep"):
        require(mark.kwargs["available"], mark.kwargs["what"])


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the installed `rlenv` console script (the real entry point), never a TTY."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(RLENV), *args],
        cwd=cwd or ROOT,
        env=merged,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def in_process(*args: str) -> Any:
    """The `rlenv` app called in this process (typer's runner; `.exit_code`, `.stdout`,
    `.stderr`): for a call whose point is the library behind the command (a refusal's one line
    and exit code, a report of a run directory), not the process boundary, which `cli` keeps."""
    from typer.testing import CliRunner

    from rlenv.cli import app

    return CliRunner().invoke(app, list(args))


def sha256(path: Path) -> str:
    from rlenv.canonical import sha256_file

    return sha256_file(path)


class EnvBuilder:
    """Writes a spec, its inputs and a helper module into a directory; returns the spec path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = f"envmod_{uuid.uuid4().hex[:10]}"

    def write(
        self,
        code: str = "",
        inputs: list[dict[str, Any]] | None = None,
        policy: str = "policy",
        **spec: Any,
    ) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / f"{self.module}.py").write_text(textwrap.dedent(code))
        records = (
            inputs
            if inputs is not None
            else [
                {"id": "a", "prompt": "say a", "answer": "a"},
                {"id": "b", "prompt": "say b", "answer": "b"},
            ]
        )
        inputs_path = self.root / "inputs.jsonl"
        inputs_path.write_text("".join(json.dumps(r) + "\n" for r in records))
        document: dict[str, Any] = {
            "name": "test-env",
            "seed": 7,
            "time": "2024-03-01T12:00:00+00:00",
            "model": f"python:{self.module}:{policy}",
            "inputs": {"path": "inputs.jsonl", "sha256": sha256(inputs_path)},
            "verifiers": [{"type": "exact_match", "expected_field": "answer"}],
            "rollouts": 2,
        }
        document.update(spec)
        # MOD named in copies: a caller's dicts (a module-level tool or verifier list) are left
        # as given, for the next test's builder to fill with its own module
        for key in ("tools", "verifiers"):
            if key in document:
                document[key] = [
                    {**item, "function": item["function"].replace("MOD", self.module)}
                    if "function" in item
                    else item
                    for item in document[key]
                ]
        if isinstance(document.get("model"), str):
            document["model"] = document["model"].replace("MOD", self.module)
        spec_path = self.root / "env.yaml"
        spec_path.write_text(yaml.safe_dump(document, sort_keys=False))
        return spec_path


@pytest.fixture
def env_builder(tmp_path: Path) -> EnvBuilder:
    return EnvBuilder(tmp_path / "env")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def probe_report(args: list[str], cwd: Path) -> Any:
    """Run a probe (`python ARGS...`) in a fresh interpreter from `cwd`; what it printed last on
    stderr, as JSON (its exit code must be 0)."""
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stderr.strip().splitlines()[-1])


SEARCH_TOOL: dict[str, Any] = {
    "name": "search",
    "function": "MOD:search",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
}
"""A tool `search(query)` of the env module (`EnvBuilder` names the module for MOD)."""


def lookup_cassette(path: Path, api: str) -> Path:
    """A vcrpy cassette of one GET API/v1/lookup answered {"kind": "fruit"}."""
    interaction = {
        "request": {"method": "GET", "uri": f"{api}/v1/lookup", "body": None, "headers": {}},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": json.dumps({"kind": "fruit"})},
        },
    }
    path.write_text(yaml.safe_dump({"version": 1, "interactions": [interaction]}))
    return path


@pytest.fixture
def chat() -> Any:
    """Start real chat-completions servers on 127.0.0.1:0; all are stopped after the test."""
    from tests.chat_server import start_chat_server

    servers: list[Any] = []

    def start(**options: Any) -> Any:
        server, _, _ = start_chat_server(**options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@contextlib.contextmanager
def json_endpoint(reply: Callable[[dict[str, Any]], tuple[int, Any]]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1:0 that answers each JSON POST with ``reply(body)`` ->
    (status, JSON value); yields its base URL, stopped on exit."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, value = reply(body)
            payload = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def local_ray(num_cpus: int, store_mb: int) -> Iterator[Any]:
    """A local Ray instance for a test module (its `ray.init` context), shut down after. Ray
    gives its raylet 30 s to register, which a loaded machine can miss: tried three times."""
    import ray

    for attempt in range(3):
        try:
            context = ray.init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                object_store_memory=store_mb * 1024 * 1024,
                log_to_driver=False,
                logging_level="WARNING",
            )
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    try:
        yield context
    finally:
        ray.shutdown()
