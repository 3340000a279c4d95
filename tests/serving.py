"""Helpers of the `rlenv serve` tests and bench: the real server as a subprocess on loopback,
a tiny env with a tool, and a client-side policy."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import RLENV, ROOT, EnvBuilder, sha256

TOOL_CODE = """
import json

def policy(messages, tools, ctx):
    last = messages[-1]
    if last["role"] == "tool":
        return json.loads(last["content"])["word"]
    word = last["content"].split()[-1]
    call = {"id": "call_0", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"word": word})}}
    return {"content": None, "tool_calls": [call]}

def lookup(args, ctx):
    return {"word": args["word"], "length": len(args["word"])}
"""
HELD_OUT = [{"id": f"h{n}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(4)]
TRAIN = [
    {"id": "t1", "prompt": "repeat cherry", "answer": "cherry"},
    {"id": "t2", "prompt": "repeat DATE", "answer": "DATE"},
]
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {
        "type": "object",
        "properties": {"word": {"type": "string", "description": "the word"}},
        "required": ["word"],
    },
    "function": "MOD:lookup",
}


def tool_env(root: Path) -> Path:
    """A spec whose policy looks the input's last word up, then answers it; held-out and
    training inputs."""
    builder = EnvBuilder(root)
    spec = builder.write(
        TOOL_CODE,
        inputs=HELD_OUT,
        tools=[dict(LOOKUP)],
        rollouts=1,
        limits={"max_turns": 3, "timeout_s": 30},
    )
    document = json.loads(json.dumps(__import__("yaml").safe_load(spec.read_text())))
    table = root / "train.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in TRAIN))
    document["train_inputs"] = {"path": "train.jsonl", "sha256": sha256(table)}
    spec.write_text(json.dumps(document))
    return spec


def tool_call(word: str, number: int = 0) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "id": f"call_{number}",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"word": word})},
            }
        ]
    }


@contextlib.contextmanager
def served(
    spec: Path, out: Path, *options: str, startup_s: float = 300
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`rlenv serve SPEC --port 0 --out OUT` as a subprocess: its URL once it listens (read
    from its announce line on stderr); stopped with SIGTERM (the summary is written then)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(
        [str(RLENV), "serve", str(spec), "--port", "0", "--out", str(out), *options],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + startup_s
        url = None
        lines = []
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("rlenv serve:") and " on http://" in line:
                url = line.split(" on ", 1)[1].split()[0]
                break
        assert url, "".join(lines) or f"exit {process.poll()}"
        yield url, process
    finally:
        stop(process)


def stop(process: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    """SIGTERM the server and wait for it (its stdout and the rest of its stderr)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return out, err


def search_policy_path() -> None:
    """The search env's python helpers importable here (its baseline policy, client-side)."""
    envs = str(ROOT / "envs")
    if envs not in sys.path:
        sys.path.insert(0, envs)
