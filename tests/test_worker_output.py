"""What in-world code writes to fd 1 and 2 during one worker call is that call's output: kept
per call (never mixed with the next), cut at OUTPUT_LIMIT, subprocesses included. Run in a
child interpreter: the capture redirects this process's own fds."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, os, subprocess, sys
from rlenv.worker.capture import OUTPUT_LIMIT, CapturedOutput

results = []
def call(action):
    with CapturedOutput() as captured:
        action()
    results.append(captured.as_record(lambda text: text))

call(lambda: (print("from print"), os.write(2, b"err bytes")))
call(lambda: None)
call(lambda: subprocess.run(["sh", "-c", "echo from a child; echo child err >&2"]))
call(lambda: os.write(1, b"X" * (3 * OUTPUT_LIMIT)))
call(lambda: sys.stdout.write("buffered, unflushed"))
os.write(3, json.dumps(results).encode())
"""


def test_each_call_keeps_its_own_output() -> None:
    read, write = __import__("os").pipe()
    process = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("os.write(3,", f"os.write({write},")],
        capture_output=True,
        pass_fds=(write,),
        timeout=120,
    )
    __import__("os").close(write)
    with open(read, "rb") as handle:
        results = json.loads(handle.read() or b"null")
    assert process.returncode == 0, process.stderr.decode()[-2000:]
    assert process.stdout == b""  # nothing escaped to the real stdout
    first, empty, child, big, unflushed = results
    assert first == {"stdout": "from print\n", "stderr": "err bytes", "truncated": False}
    assert empty is None
    assert child == {"stdout": "from a child\n", "stderr": "child err\n", "truncated": False}
    assert big["truncated"] is True and big["stdout"] == "X" * 16 * 1024 and big["stderr"] == ""
    assert unflushed == {"stdout": "buffered, unflushed", "stderr": "", "truncated": False}
