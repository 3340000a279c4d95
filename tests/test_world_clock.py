"""The clock frozen below Python (issue 26 item 3): with the spec's instant in 2024, every way
in-world code reads the date — `time.clock_gettime(CLOCK_REALTIME)`, libc's clock_gettime and time
through ctypes, a new file's modification time, SQLite's `strftime('%Y','now')`, NumPy's
`datetime64('now')`, a `date` subprocess — says 2024: in a python policy, a tool and a
verifier of a real `rlenv run`, and in the code-verifier sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlenv.sandbox import _mechanism_works as mechanism_works
from rlenv.sandbox import faketime_library
from tests.conftest import EnvBuilder, cli, needs, read_jsonl

YEAR = 2024
INSTANT = "2024-03-01T12:00:00+00:00"

PROBE = r'''
import ctypes, json, os, sqlite3, subprocess, tempfile, time


def years(where):
    """The year each clock says, read from `where` (a writable directory)."""
    seen = {}
    seen["time.clock_gettime"] = time.clock_gettime(time.CLOCK_REALTIME)
    libc = ctypes.CDLL(None)
    moment = (ctypes.c_long * 2)()
    libc.clock_gettime(0, moment)
    seen["ctypes clock_gettime"] = moment[0]
    libc.time.restype = ctypes.c_long
    seen["ctypes time"] = libc.time(None)
    path = os.path.join(where, "clock-probe.txt")
    with open(path, "w") as handle:
        handle.write("x")
    seen["new file mtime"] = os.stat(path).st_mtime
    seen["new file ctime"] = os.stat(path).st_ctime
    os.remove(path)
    row = sqlite3.connect(":memory:").execute("select strftime('%Y', 'now')").fetchone()
    out = {name: time.gmtime(value).tm_year for name, value in seen.items()}
    out["sqlite strftime"] = int(row[0])
    try:
        import numpy
    except ImportError:
        pass
    else:
        out["numpy datetime64"] = int(str(numpy.datetime64("now", "Y")))
    date = subprocess.run(["date", "-u", "+%Y"], capture_output=True, text=True).stdout
    out["date subprocess"] = int(date.strip() or 0)
    return out


def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        probe = json.dumps({"policy": years(os.getcwd())})
        return {"tool_calls": [{"id": "c", "function": {"name": "probe", "arguments": probe}}]}
    return messages[-1]["content"]


def tool(args, ctx):
    return json.dumps({**args, "tool": years(os.getcwd())})


def verifier(answer, record, ctx):
    return {"passed": True, "detail": json.dumps({"verifier": years(os.getcwd())})}


if __name__ == "__main__":
    seen = years(os.getcwd())
    seen["seeded file mtime"] = time.gmtime(os.stat(__file__).st_mtime).tm_year
    print(json.dumps(seen))
'''


def _wrong(readings: dict[str, dict[str, int]]) -> list[str]:
    return [
        f"{where}: {name} says {year}"
        for where, seen in readings.items()
        for name, year in seen.items()
        if year != YEAR
    ]


@needs(faketime_library() is not None, "libfaketime")
def test_every_clock_in_the_world_reads_the_spec_year(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(
        PROBE,
        inputs=[{"id": "a", "prompt": "go"}],
        tools=[
            {
                "name": "probe",
                "function": "MOD:tool",
                "description": "read the clocks",
                "parameters": {"type": "object"},
            }
        ],
        verifiers=[{"type": "python", "function": "MOD:verifier"}],
        rollouts=1,
        time=INSTANT,
    )
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    record = read_jsonl(out / "results.jsonl")[0]
    assert record["status"] == "ok", record["error"]
    readings = json.loads(record["answer"])
    readings.update(json.loads(record["verifiers"][0]["detail"]))
    assert set(readings) == {"policy", "tool", "verifier"}
    assert len(readings["tool"]) >= 8
    assert _wrong(readings) == [], json.dumps(readings)


MECHANISMS = [m for m in ("bwrap", "unshare") if mechanism_works(m)] or ["missing"]


@needs(faketime_library() is not None, "libfaketime")
@needs(MECHANISMS != ["missing"], "a namespace sandbox (bubblewrap or unshare)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_clock_in_the_sandbox_reads_the_spec_year(tmp_path: Path, mechanism: str) -> None:
    from rlenv.sandbox import SandboxLimits, run_sandboxed, sandbox_python

    (tmp_path / "probe.py").write_text(PROBE)
    limits = SandboxLimits(cpu_seconds=10, wall_seconds=30, memory_mb=2048, frozen_time=INSTANT)
    result = run_sandboxed(
        [sandbox_python(), "probe.py"],
        tmp_path,
        limits=limits,
        mechanism=mechanism,
        env={"OPENBLAS_NUM_THREADS": "1"},  # NumPy's BLAS threads need more than a share
    )
    assert result.returncode == 0, result.stderr.decode()
    readings = {"sandbox": json.loads(result.stdout)}
    # a file rlenv put in the workdir (the model's solution.py) has a fixed mtime, as a
    # snapshot copy's: 1970, never the host's date
    assert readings["sandbox"].pop("seeded file mtime") == 1970
    assert len(readings["sandbox"]) >= 8
    assert _wrong(readings) == [], json.dumps(readings)
