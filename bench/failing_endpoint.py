"""How long `rlenv run` takes to say that its endpoint failed on every rollout, and its exit code.

The issue 18 figure: runs whose endpoint failed on every rollout (HTTP 500, garbage, a dead port)
exited 0 after 61 s (40 rollouts, default retries). Here 20 inputs x 2 rollouts of a one-tool
env against `tests/chat_server.py` answering every request with the fault (or a closed port),
with the default client (4 retries, seeded exponential backoff) and with `--retries 0`.
Target: exit 1 in every case (the run could not produce its scores; PASS/MISS says this);
`--retries 0` takes the retry backoff out of the wall time (compare the two lines of a fault).

    .venv/bin/python bench/failing_endpoint.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chat_server import start_chat_server  # noqa: E402

TOOLS = 'def search(args, ctx):\n    return "result for " + args["query"]\n'


def _env(root: Path, inputs: int) -> Path:
    import hashlib

    root.mkdir(parents=True, exist_ok=True)
    (root / "bench_tools.py").write_text(TOOLS)
    records = [{"id": f"q{n}", "prompt": f"say {n}", "answer": str(n)} for n in range(inputs)]
    lines = [json.dumps(record) for record in records]
    data = ("\n".join(lines) + "\n").encode()
    (root / "inputs.jsonl").write_bytes(data)
    spec = {
        "name": "failing-endpoint",
        "seed": 1,
        "time": "2025-01-01T00:00:00+00:00",
        "inputs": {"path": "inputs.jsonl", "sha256": hashlib.sha256(data).hexdigest()},
        "tools": [
            {
                "name": "search",
                "function": "bench_tools:search",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            }
        ],
        "verifiers": [{"type": "exact_match", "expected_field": "answer"}],
        "rollouts": 2,
    }
    path = root / "env.yaml"
    path.write_text(json.dumps(spec))
    return path


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only --retries 0")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlenv-bench-endpoint-"))
    spec = _env(work / "env", 20)
    rlenv = str(Path(sys.executable).parent / "rlenv")
    print(f"load average {open('/proc/loadavg').read().split()[:3]}")
    for fault in ("500", "garbage", "dead port"):
        server = None
        if fault == "dead port":
            base = f"http://127.0.0.1:{_closed_port()}"
        else:
            server, base, _ = start_chat_server(default_fault=fault)
        for retries in ([None] if not args.quick else []) + ["0"]:
            out = work / f"run-{fault.replace(' ', '-')}-{retries}"
            command = [rlenv, "run", str(spec), "--model", "openai:bench", "--base-url", base]
            command += ["--out", str(out), "--json"]
            if retries is not None:
                command += ["--retries", retries]
            started = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True)
            wall = time.monotonic() - started
            counts = json.loads(done.stdout)["counts"] if done.stdout.strip() else {}
            label = "default retries (4)" if retries is None else "--retries 0"
            verdict = "PASS" if done.returncode == 1 else "MISS"
            code = done.returncode
            print(f"{fault:<10} {label:<20} exit {code}  {wall:6.1f} s  {counts}  {verdict}")
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
