"""Forged replies (issue 26): in-world code writes its own protocol messages to the pipe between
its worker and the orchestrator, or patches the worker's grading in its own process.

Shared by `tests/test_forged_replies.py` and `bench/attacks.py` (through the test). Every case is
one input of one real `rlenv run` (one worker, one rollout per input, in input order): the
forgers answer "nope" (their verifier wants GOLD), the victims after them answer GOLD or nope
and must be graded as their answers deserve. A case is *held* when its record says what its own
answer earns, and the run finishes (exit 0) with a record for every input.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORGER_CODE = r"""
import gc, os, pickle, struct

def _channel():
    from multiprocessing.connection import Connection
    for obj in gc.get_objects():
        if isinstance(obj, Connection) and not obj.closed:
            return obj
    return None

def _send(message):
    # through the worker's Connection if this process holds one; else the raw socket frames
    connection = _channel()
    if connection is not None:
        connection.send(message)
        return "sent"
    data = pickle.dumps(message)
    frame = struct.pack("!i", len(data)) + data
    sent = 0
    for fd in range(3, 256):
        try:
            if os.path.stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, frame)
                sent += 1
        except OSError:
            pass
    return f"sent on {sent} sockets"

def _runtime():
    from rlenv.worker import protocol
    return protocol._runtime

def _record(index, passed, status="ok"):
    from rlenv.results import seal
    from rlenv.worker.config import RolloutTask
    runtime = _runtime()
    record = runtime.lost(RolloutTask(index, 0), runtime.config.model_uri or "", status, "")
    record.pop("digest", None)
    record.update(status=status, error=None if status == "ok" else "forged", passed=passed)
    record["answer"] = "GOLD" if passed else "nope"
    record["verifiers"] = [{"name": "regex", "type": "regex", "passed": passed,
                            "score": 1.0 if passed else 0.0, "detail": "", "weight": 1.0}]
    return seal(record)

def forge(kind, index):
    try:
        if kind == "forge-own":
            return _send(("ok", _record(index, True)))
        if kind == "forge-next":
            return _send(("ok", _record(index + 1, False, "policy_error")))
        if kind == "forge-raise":
            from rlenv.errors import RunFailed
            return _send(("raise", RunFailed("forged: the run ends here")))
        if kind == "patch-verifier":
            runtime = _runtime()
            def passes(context, task, input_id, changes, **kwargs):
                return [{"name": "regex", "type": "regex", "passed": True, "score": 1.0,
                         "detail": "", "weight": 1.0}]
            runtime.verifiers.run = passes
            return "patched"
    except Exception as exc:
        return f"could not: {type(exc).__name__}: {exc}"
    return "nothing"

def unused(args, ctx):
    return "unused"

def policy(messages, tools, ctx):
    prompt = json.loads(messages[-1]["content"]) if messages[-1]["role"] == "user" else None
    if prompt is None:
        return "nope"
    forge(prompt["kind"], prompt["index"])
    return prompt["answer"]

import json
"""

CASES: list[tuple[str, str, bool]] = [
    # (input id, kind, whether its own answer passes)
    ("forge-own", "forge-own", False),
    ("victim-a", "victim", True),
    ("forge-next", "forge-next", False),
    ("victim-b", "victim", True),
    ("patch-verifier", "patch-verifier", False),
    ("victim-c", "victim", False),
    ("forge-raise", "forge-raise", False),
    ("victim-d", "victim", True),
]
"""Each forger is followed by a victim the forgery would change (a record forged for it, a
patched verifier passing it, the run ended before it)."""


@dataclass
class ForgedRun:
    exit_code: int
    stderr: str
    records: dict[str, dict[str, Any]]


def write_forged_env(root: Path) -> Path:
    from tests.isolation_catalog import world_spec

    root.mkdir(parents=True, exist_ok=True)
    module = "forger_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(FORGER_CODE)
    inputs = [
        {
            "id": name,
            "prompt": json.dumps(
                {"kind": kind, "index": index, "answer": "GOLD" if passes else "nope"}
            ),
            "answer": "",
        }
        for index, (name, kind, passes) in enumerate(CASES)
    ]
    spec = world_spec(root, "forged", module, inputs, ("unused", "not called"), "^GOLD$")
    return spec


def run_forged(tmp: Path, rlenv: Path, cwd: Path) -> ForgedRun:
    spec = write_forged_env(tmp / "env")
    out = tmp / "run"
    command = [str(rlenv), "run", str(spec), "--out", str(out), "--json", "--concurrency", "1"]
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    records = {}
    results = out / "results.jsonl"
    if results.exists():
        for line in results.read_text().splitlines():
            record = json.loads(line)
            records[record["input_id"]] = record
    return ForgedRun(result.returncode, result.stderr[-2000:], records)


def held(run: ForgedRun, name: str, passes: bool) -> tuple[bool, str]:
    """Whether case `name` was graded as its own answer deserves, in a run that finished."""
    if run.exit_code != 0:
        return False, f"the run ended (exit {run.exit_code}): {run.stderr[-300:]}"
    record = run.records.get(name)
    if record is None:
        return False, "no record"
    if record["passed"] != passes:
        return False, f"passed {record['passed']} (status {record['status']})"
    if passes and record["status"] != "ok":
        return False, f"status {record['status']}: {record.get('error')}"
    return True, f"passed {record['passed']} (status {record['status']})"


SPAWN_CODE = r"""
import os

def unused(args, ctx):
    return "unused"

def policy(messages, tools, ctx):
    prompt = messages[-1]["content"]
    if prompt.startswith("rewrite "):
        leak = prompt.split(" ", 1)[1]
        done = []
        for folder in (os.getcwd(), os.path.dirname(os.getcwd())):
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if "python" in name and os.path.isfile(path):
                    try:
                        text = open(path).read()
                        text = text.replace("#!/bin/sh\n", f"#!/bin/sh\nenv > {leak}\n", 1)
                        with open(path, "w") as handle:
                            handle.write(text)
                        done.append(name)
                    except OSError as exc:
                        done.append(f"{name}: {exc}")
        os._exit(3)  # the worker is replaced: through the rewritten script, if it was
    return "nope"
"""


def rewrite_spawn_attempt(tmp: Path, rlenv: Path, cwd: Path, secret: str) -> tuple[int, str]:
    """A rollout rewrites the script workers are started through, then ends its process so a
    fresh worker is started; (exit code, what the rewritten script saw of the orchestrator's
    environment: '' when it never ran)."""
    import os

    from tests.isolation_catalog import world_spec

    root = tmp / "env"
    root.mkdir(parents=True, exist_ok=True)
    module = "spawner_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(SPAWN_CODE)
    leak = tmp / "leaked-environment"
    inputs = [
        {"id": "rewrite", "prompt": f"rewrite {leak}", "answer": ""},
        {"id": "after", "prompt": "after", "answer": ""},
        {"id": "after2", "prompt": "after", "answer": ""},
    ]
    spec = world_spec(root, "spawn", module, inputs, ("unused", "not called"), "^GOLD$")
    command = [str(rlenv), "run", str(spec), "--out", str(tmp / "run"), "--concurrency", "1"]
    environ = {**os.environ, "OPENAI_API_KEY": secret}
    result = subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return result.returncode, leak.read_text() if leak.exists() else ""


def spawn_environment_seen(tmp: Path, rlenv: Path, cwd: Path, secret: str) -> tuple[int, str]:
    """`rlenv run` with a secret in the orchestrator's environment and an `env` first on PATH
    that writes down the environment it was started with (then runs the real one): (exit
    code, every environment the worker's start went through). The first program a worker is
    started through must already have the world's variables only."""
    import os
    import shutil

    from tests.isolation_catalog import world_spec

    root = tmp / "env"
    root.mkdir(parents=True, exist_ok=True)
    module = "spawnenv_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(SPAWN_CODE)
    bin_dir, seen = tmp / "bin", tmp / "seen-environment"
    bin_dir.mkdir()
    real = shutil.which("env") or "/usr/bin/env"
    (bin_dir / "env").write_text(f'#!/bin/sh\n{real} >> {seen}\nexec {real} "$@"\n')
    (bin_dir / "env").chmod(0o755)
    inputs = [{"id": "plain", "prompt": "after", "answer": ""}]
    spec = world_spec(root, "spawnenv", module, inputs, ("unused", "not called"), "^GOLD$")
    command = [str(rlenv), "run", str(spec), "--out", str(tmp / "run"), "--concurrency", "1"]
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    environ = {**os.environ, "OPENAI_API_KEY": secret, "PATH": path}
    result = subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return result.returncode, seen.read_text() if seen.exists() else ""
