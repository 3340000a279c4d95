"""How long the whole test suite takes (the project's rule: well under 15 minutes on a 2-core
machine): `pytest` with the addopts of pyproject.toml plus `--durations=30`, timed from outside.
Writes the total wall time, the load average while it ran (sampled every 10 s: the machine may
be shared), each test file's summed time (from a JUnit XML) and pytest's 30 slowest phases.

    PYTHONPATH=. python bench/suite_time.py [--out bench/results/suite_time.txt] [PYTEST_ARGS...]

Extra arguments go to pytest (e.g. `--dist worksteal` to compare a scheduling, or a few test
files to time a part). A failing suite is still timed; its exit code is in the output.

On a shared machine wall time follows the load; the CPU time of pytest's whole process tree
(every rlenv, worker and server process it starts) does much less. It is read from a cgroup-v1
`cpuacct` group made for the run where this user may make one (root, as here), else omitted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load() -> float:
    return os.getloadavg()[0]


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _cpu_group() -> Path | None:
    """A fresh cpuacct cgroup for the run (None where none can be made)."""
    group = CPUACCT / f"suite-time-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def _join(group: Path | None) -> None:
    """Run in the child before exec: it and everything it starts count in `group`."""
    if group is not None:
        (group / "cgroup.procs").write_text(str(os.getpid()))


def _cpu_seconds(group: Path | None) -> float | None:
    if group is None:
        return None
    used = int((group / "cpuacct.usage").read_text()) / 1e9
    with contextlib.suppress(OSError):  # not while a process the run left is still in it
        group.rmdir()
    return used


def per_file(junit: Path) -> list[tuple[float, int, str]]:
    """(summed seconds, tests, file) for each test file in a JUnit XML, longest first."""
    totals: dict[str, list[float]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "").split(".")
        file = "/".join(name[: name.index(next(p for p in name if p.startswith("test_"))) + 1])
        entry = totals.setdefault(f"{file}.py", [0.0, 0])
        entry[0] += float(case.get("time", 0) or 0)
        entry[1] += 1
    return sorted(((t, int(n), f) for f, (t, n) in totals.items()), reverse=True)


def slowest(output: str) -> list[str]:
    """The lines of pytest's `slowest durations` block."""
    lines = output.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if "slowest" in line and "durations" in line), None
    )
    if start is None:
        return []
    block = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("="):
            break
        block.append(line)
    return block


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "suite_time.txt")
    options, pytest_args = parser.parse_known_args()
    samples: list[float] = [_load()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(10):
            samples.append(_load())

    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="suite-time-") as scratch:
        junit = Path(scratch) / "junit.xml"
        command = [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=30",
            f"--junitxml={junit}", *pytest_args,
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        group = _cpu_group()
        started = time.monotonic()
        finished = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            preexec_fn=lambda: _join(group),
        )
        wall = time.monotonic() - started
        cpu = _cpu_seconds(group)
        done.set()
        files = per_file(junit) if junit.is_file() else []
    outcomes = (" passed", " failed", " error", " skipped")
    summary = next(
        (
            line
            for line in reversed(finished.stdout.splitlines())
            if " in " in line and any(word in line for word in outcomes)
        ),
        "",
    )
    shown = [a for a in command[3:] if not a.startswith("--junitxml")]
    lines = [
        f"suite wall time      {wall / 60:.1f} min ({wall:.0f} s), exit {finished.returncode}",
        "process-tree CPU     "
        + ("n/a (no cpuacct cgroup here)" if cpu is None else f"{cpu / 60:.1f} min ({cpu:.0f} s)"),
        f"command              pytest {' '.join(shown)} (+ pyproject's addopts)",
        f"pytest               {summary.strip('= ')}",
        f"load average (1 min) mean {sum(samples) / len(samples):.1f}, max {max(samples):.1f} "
        f"over {len(samples)} samples; {os.cpu_count()} cores",
        "",
        "test files by summed test time (s, tests):",
        *(f"  {seconds:7.1f} {count:4d}  {file}" for seconds, count, file in files[:30]),
        "",
        "30 slowest phases (pytest --durations=30):",
        *(f"  {line}" for line in slowest(finished.stdout)),
    ]
    text = "\n".join(lines) + "\n"
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(text)
    print(text, end="")
    if finished.returncode not in (0, 1):
        print(finished.stdout[-3000:] + finished.stderr[-3000:], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
