"""A cassette's index built on a cold cache by a child interpreter (rlenv.world.index_child):
the same index, findings and cache file as the build in process; the build's errors raised as
themselves; a read-only cache still answered; a child that dies is one line; no child to be had
builds in process; and the orchestrator's env check imports neither vcrpy nor detect-secrets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

import rlenv.world.index_child as index_child
import rlenv.world.replay as replay
from rlenv.env import load_environment
from rlenv.errors import RunFailed, SpecError, UserError
from rlenv.world.replay import build_index, load_index
from rlenv.world.scrub import Scrubber
from tests.conftest import ROOT, EnvBuilder, cli, in_process, sha256

API = "http://api.example.test"
POLICY = "def policy(messages, tools, ctx):\n    return 'a'\n"
TOOL = "def lookup(args, ctx):\n    return 'x'\n"


def interaction(uri: str, body: str | None, answer: Any) -> dict[str, Any]:
    return {
        "request": {
            "method": "POST" if body else "GET",
            "uri": uri,
            "body": body,
            "headers": {"Content-Type": ["application/json"]} if body else {},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": json.dumps(answer)},
        },
    }


def cassette(path: Path, *interactions: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "interactions": list(interactions)}))
    return path


def some_cassette(path: Path) -> Path:
    """Repeats (first response wins), a body keyed by content, and a secret to find."""
    return cassette(
        path,
        interaction(f"{API}/x?b=2&a=1", None, "first"),
        interaction(f"{API}/x?a=1&b=2", None, "first"),
        interaction(f"{API}/y", '{"term": "a", "n": 1}', {"hit": 1}),
        interaction(f"{API}/z?api_key=sk-live-0123456789abcdef", None, "keyed"),
    )


def cache_files(cache: Path) -> dict[str, bytes]:
    folder = cache / "cassette-index"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir()} if folder.is_dir() else {}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("RLENV_CACHE_DIR", str(path))
    return path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """The index children started (each `start_python` call the indexer makes)."""
    processes: list[subprocess.Popen[bytes]] = []
    real = index_child.start_python

    def spy(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        processes.append(real(*args, **kwargs))
        return processes[-1]

    monkeypatch.setattr(index_child, "start_python", spy)
    return processes


def refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"called with {args}")


def no_build_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is not built in this process (the child builds it with its own copy)."""
    monkeypatch.setattr(replay, "build_index", refused)


def test_a_cold_index_built_in_a_child_is_the_one_built_in_process(
    tmp_path: Path,
    cache: Path,
    started: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = some_cassette(tmp_path / "c.yaml")
    here = load_index(path, Scrubber(extra_names=["term"]))
    written_here = cache_files(cache)
    assert not started and len(written_here) == 1
    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "cold"))
    with monkeypatch.context() as patched:
        no_build_here(patched)
        aside = load_index(path, Scrubber(extra_names=["term"]), aside=True)
    assert len(started) == 1 and started[0].returncode == 0
    assert dict(aside[0]) == dict(here[0]) and len(aside[0]) == 3
    assert aside[1] == here[1] and any("api_key" in finding for finding in aside[1])
    assert cache_files(tmp_path / "cold") == written_here  # the very bytes, under the same name
    # the warm path reads what the child wrote: no child, no build
    no_build_here(monkeypatch)
    monkeypatch.setattr(index_child, "start_python", refused)
    again = load_index(path, Scrubber(extra_names=["term"]), aside=True)
    assert dict(again[0]) == dict(here[0]) and again[1] == here[1]


def _duplicates(path: Path) -> Path:
    return cassette(
        path,
        interaction(f"{API}/x", '{"term": "a", "password": "REDACTED"}', 1),
        interaction(f"{API}/x", '{"term": "a", "password": "other-value"}', 2),
    )


def _unparsable(path: Path) -> Path:
    path.write_text("interactions: [" + "x" * 400)
    return path


def _empty(path: Path) -> Path:
    path.write_text("  \n")
    return path


def _unplayable(path: Path) -> Path:
    bad = interaction(f"{API}/x", None, 1)
    bad["response"]["status"]["code"] = 600
    return cassette(path, bad)


def _absent(path: Path) -> Path:
    return path


@pytest.mark.parametrize("broken", [_duplicates, _unparsable, _empty, _unplayable, _absent])
def test_the_childs_error_is_the_one_raised_in_process(
    tmp_path: Path, cache: Path, broken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = broken(tmp_path / "c.yaml")
    with pytest.raises(UserError) as in_here:
        build_index(path, Scrubber())
    no_build_here(monkeypatch)
    with pytest.raises(UserError) as aside:
        index_child.index_aside(path, Scrubber(), cache / "cassette-index" / "i.pickle")
    assert type(aside.value) is type(in_here.value) is SpecError
    assert str(aside.value) == str(in_here.value) and "\n" not in str(aside.value)
    assert (aside.value.message, aside.value.where) == (in_here.value.message, str(path))
    assert cache_files(cache) == {}


def _env_with_cassette(env: EnvBuilder, write: Any) -> Path:
    (env.root / "cassettes").mkdir(parents=True)
    path = write(env.root / "cassettes" / "lookup.yaml")
    pin = {"path": "cassettes/lookup.yaml", "sha256": sha256(path)}
    return env.write(
        POLICY + TOOL, tools=[{"name": "lookup", "function": "MOD:lookup", "cassette": pin}]
    )


@pytest.mark.parametrize("broken", [_duplicates, _unparsable])
def test_run_says_the_childs_error_in_one_line_exit_code_2(
    tmp_path: Path, env_builder: EnvBuilder, broken: Any
) -> None:
    spec = _env_with_cassette(env_builder, broken)
    path = spec.parent / "cassettes" / "lookup.yaml"
    with pytest.raises(SpecError) as in_here:
        build_index(path, Scrubber())
    out = tmp_path / "out"
    result = cli("run", str(spec), "--out", str(out), env={"RLENV_CACHE_DIR": str(tmp_path / "c")})
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"rlenv: error: {in_here.value}\n"


def test_a_read_only_cache_still_gets_the_childs_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[subprocess.Popen[bytes]]
) -> None:
    path = some_cassette(tmp_path / "c.yaml")
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")  # the cache cannot be made under a file (a read-only cache, for root)
    monkeypatch.setenv("RLENV_CACHE_DIR", str(blocked))
    here = build_index(path, Scrubber())
    no_build_here(monkeypatch)
    aside = load_index(path, Scrubber(), aside=True)
    assert len(started) == 1
    assert dict(aside[0]) == dict(here[0]) and aside[1] == here[1]
    assert blocked.read_text() == ""


def test_no_child_to_be_had_builds_in_process(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = some_cassette(tmp_path / "c.yaml")
    calls: list[str] = []

    def no_process(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(index_child, "start_python", no_process)
    built = load_index(path, Scrubber(), aside=True)
    assert len(calls) == 1
    assert len(built[0]) == 3 and any("api_key" in finding for finding in built[1])
    assert len(cache_files(cache)) == 1


DIES = "import os, signal, sys; sys.stdin.read(); "
KILLED = "killed by SIGKILL (out of memory?)"


@pytest.mark.parametrize(
    ("ending", "how"),
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", KILLED),
        ("os.write(1, b'I\\x80\\x05\\x95'); os.kill(os.getpid(), signal.SIGKILL)", KILLED),
        ("os.kill(os.getpid(), signal.SIGTERM)", "killed by SIGTERM"),
        ("sys.exit(3)", "exit status 3"),
        ("sys.exit(0)", "exit status 0"),  # (nothing said: no answer either)
    ],
)
def test_a_child_that_dies_is_one_line(
    tmp_path: Path,
    env_builder: EnvBuilder,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    ending: str,
    how: str,
) -> None:
    """A child that ends before it answers, or half-way through its answer (the second)."""
    spec = _env_with_cassette(env_builder, some_cassette)
    monkeypatch.setattr(index_child, "_CHILD", DIES + ending)
    with pytest.raises(RunFailed) as dead:
        load_environment(spec, purpose="run", world_checks="workers")
    path = spec.parent / "cassettes" / "lookup.yaml"
    assert re.fullmatch(
        rf"indexing the cassette {re.escape(str(path))}: its process \(pid \d+\) ended before"
        rf" it answered: {re.escape(how)}",
        str(dead.value),
    )
    result = in_process("run", str(spec), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert result.stderr.startswith("rlenv: error: indexing the cassette ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert cache_files(cache) == {}


def test_a_child_killed_while_it_reads_the_cassette_is_one_line(
    tmp_path: Path,
    cache: Path,
    started: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)  # the child blocks reading it: the test knows where the child is
    monkeypatch.setattr(replay, "sha256_file", lambda path: "0" * 64)  # (here, not the child)
    raised: list[BaseException] = []

    def load() -> None:
        try:
            load_index(fifo, Scrubber(), aside=True)
        except BaseException as exc:  # noqa: BLE001 - the test reads it below
            raised.append(exc)

    loading = threading.Thread(target=load, daemon=True)
    loading.start()
    with open(fifo, "wb"):  # returns once the child has opened the cassette to read it
        os.kill(started[0].pid, signal.SIGKILL)
    loading.join(timeout=60)
    assert not loading.is_alive()
    assert len(raised) == 1 and type(raised[0]) is RunFailed
    assert str(raised[0]) == (
        f"indexing the cassette {fifo}: its process (pid {started[0].pid}) ended before it"
        " answered: killed by SIGKILL (out of memory?)"
    )
    assert cache_files(cache) == {}


_IMPORTS = """
import json, sys
from rlenv.env import load_environment
load_environment(sys.argv[1], purpose="run", world_checks="workers")
print(json.dumps(sorted(name for name in ("vcr", "detect_secrets") if name in sys.modules)))
"""


@pytest.mark.parametrize("cold", [True, False])
def test_the_env_check_imports_neither_vcrpy_nor_detect_secrets(
    env_builder: EnvBuilder, cache: Path, cold: bool
) -> None:
    spec = _env_with_cassette(env_builder, some_cassette)
    document = yaml.safe_load(spec.read_text())
    document["scrub"] = {"allow": ["lookup.yaml#interaction 3"]}  # its one secret: it passes
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    if not cold:
        load_index(spec.parent / "cassettes" / "lookup.yaml", Scrubber())
    done = subprocess.run(
        [sys.executable, "-P", "-c", _IMPORTS, str(spec)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "RLENV_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert len(cache_files(cache)) == 1  # the check built the index (cold) or read it (warm)
