"""`rlenv --help` wall time (whole process, median of 15 runs); target <= 0.35 s.

Also measures `rlenv validate` (target <= 1 s on a calm machine for a python env) and `rlenv run
--limit 1` (one rollout, everything from process start to exit) on a tiny python env, a one-tool
env and the bundled file_edit env: wall and CPU of the whole process tree (the checking child
and the workers included), CPU being the figure a busy machine disturbs least. Also prints
the ten slowest imports (cumulative) of `rlenv.cli` from `python -X importtime`, so a miss can
be explained, and a frozen-world worker's start (spawn to ready, one tool, the
network namespace) with and without libfaketime preloaded (what the frozen clock below Python
costs). Run: `.venv/bin/python bench/startup.py [--quick]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGET_S = 0.35
VALIDATE_TARGET_S = 1.0  # issue 30 item 2: `rlenv validate` on a python env, calm machine
WORKER_TARGET_S = 0.5  # issue 30: a frozen-world worker ready "in well under a second"


def _import_rows(stderr: str) -> list[tuple[int, int, str]]:
    """`python -X importtime`'s lines as (cumulative us, own us, module)."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        rows.append((int(cumulative), int(own), name.strip()))
    return rows


def import_times(module: str, top: int) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, name) of the slowest imports of `module`, warm bytecode cache."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=common.bench_env(),
        check=True,
    )
    rows = _import_rows(result.stderr)
    return sorted(rows, reverse=True)[:top]


def _unfrozen(variables: dict[str, str], config: object) -> dict[str, str]:
    return variables


cpu_times: list[float] = []  # CPU seconds of each started worker's process tree, at ready
rss_sizes: list[float] = []  # RSS (MB) of each started worker's python, at ready


def _tree_cpu(pid: int) -> float:
    """user + system CPU seconds of a process and its descendants (live and reaped): what a
    worker's start cost, whatever else the machine was doing."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for member in common._tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def _worker_rss_mb(pid: int) -> float:
    """The RSS of the worker's interpreter (the largest process of the tree its start command
    made: `unshare --fork` leaves a small parent): what each rollout's fork of it copies."""
    largest = 0
    for member in common._tree(pid):
        kib = common._status_kib(member)
        largest = max(largest, kib[1] if kib else 0)
    return largest / 1024


def worker_start_seconds(
    runs: int, policy: str = "one_tool", fakes: tuple[bool, ...] = (False, True)
) -> tuple[list[float], list[float]]:
    """Wall seconds from `LocalExecutor(config, 1)` to its worker's "ready" (spawn, imports,
    the env's checks, the world entered), for the bench env of `policy` (`one_tool`: one
    replayed tool), without and with libfaketime (before issue 26 a worker started without
    it), alternated `runs` times so that a busy machine weighs on both alike."""
    from rlenv.executors import local
    from rlenv.worker.config import WorkerConfig

    real = local._with_frozen_clock
    times: tuple[list[float], list[float]] = ([], [])
    with common.temp_dir("bench-worker-start-") as root:
        spec = common.build_env(root / "env", 1000, policy=policy, tool=policy == "one_tool")
        if policy == "instant":  # the env's own module imports nothing (the bench's imports httpx)
            (spec.parent / "benchenv.py").write_text(PLAIN_MODULE)
        checks = {"purpose": "run", "model": None, "defer_expensive": False}
        for number in range(runs):
            for faked in fakes:
                local._with_frozen_clock = real if faked else _unfrozen  # type: ignore[assignment]
                work = root / f"work-{number}-{faked}"
                work.mkdir()
                config = WorkerConfig(
                    spec_path=str(spec),
                    work_root=str(work),
                    world_checks=checks,
                    model_uri=f"python:benchenv:{policy}",  # imported at start, as in a run
                )
                try:
                    started = time.perf_counter()
                    executor = local.LocalExecutor(config, 1)
                    times[faked].append(time.perf_counter() - started)
                    pid = executor.all[0].process.pid  # type: ignore[attr-defined]
                    cpu_times.append(_tree_cpu(pid))
                    rss_sizes.append(_worker_rss_mb(pid))
                    executor.close()
                finally:
                    local._with_frozen_clock = real
    return times


WORKER_PROBE = """
import pickle, sys
from rlenv.worker import protocol
protocol.init_worker(pickle.loads(open(sys.argv[1], "rb").read()))
"""

PLAIN_MODULE = '''
def instant(messages, tools, ctx):
    """Answer at once with the last word of the prompt (imports nothing, as most envs)."""
    return str(messages[-1]["content"]).split()[-1]
'''


def worker_imports(top: int) -> list[list[str]]:
    """The slowest imports (cumulative) of a worker entering the one-tool bench env's world,
    in-process (`protocol.init_worker`, sent its spec and checks as the local executor sends
    them), warm bytecode cache; and how many modules it holds."""
    import pickle

    from rlenv.spec import load_spec
    from rlenv.worker.config import WorkerConfig

    with common.temp_dir("bench-worker-imports-") as root:
        spec = common.build_env(root / "env", 4, policy="one_tool", tool=True)
        (root / "work").mkdir()
        config = WorkerConfig(
            spec_path=str(spec),
            work_root=str(root / "work"),
            model_uri="python:benchenv:one_tool",
            world_checks={"purpose": "run", "model": None, "defer_expensive": False},
            loaded_spec=load_spec(spec),
        )
        sent = root / "config.pickle"
        sent.write_bytes(pickle.dumps(config))
        for _ in range(2):  # the first builds the cassette's index cache, as a run's checks do
            result = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", WORKER_PROBE, str(sent)],
                capture_output=True,
                text=True,
                env=common.bench_env(),
                cwd=spec.parent,
                check=True,
            )
    rows = _import_rows(result.stderr)
    top_rows = [
        [name, f"{cum / 1000:.1f}", f"{own / 1000:.1f}"]
        for cum, own, name in sorted(rows, reverse=True)[:top]
    ]
    return [*top_rows, [f"({len(rows)} modules imported)", "", ""]]


def command_times(runs: int) -> float:
    """Print wall and CPU (whole process tree) of `rlenv validate` and `rlenv run --limit 1` on a
    tiny python env (no tools), a one-tool env and the bundled file_edit env; return the median
    wall of `validate` on the python env."""
    bundled = common.ROOT / "envs" / "file_edit.yaml"
    rows = []
    python_validate = 0.0
    with common.temp_dir("bench-commands-") as root:
        specs = {
            "python env (no tools)": common.build_env(root / "plain", 20, policy="instant"),
            "one-tool env": common.build_env(root / "tool", 20, policy="one_tool", tool=True),
            "bundled file_edit": bundled,
        }
        for label, spec in specs.items():
            for verb in ("validate", "run"):
                out = root / "out"
                command = [str(common.RLENV), verb, str(spec)]
                if verb == "run":
                    command += ["--limit", "1", "--out", str(out)]
                common.measure(command, pss=False, cwd=spec.parent).check()  # warm caches
                walls, cpus = [], []
                for _ in range(runs):
                    if out.exists():
                        shutil.rmtree(out)
                    done = common.measure(command, pss=False, cwd=spec.parent).check()
                    walls.append(done.wall_s)
                    cpus.append(done.cpu_s)
                wall = statistics.median(walls)
                if verb == "validate" and label.startswith("python"):
                    python_validate = wall
                what = "run --limit 1" if verb == "run" else verb
                rows.append(
                    [
                        f"rlenv {what}: {label}",
                        f"{wall:.3f}",
                        f"{min(walls):.3f}",
                        f"{max(walls):.3f}",
                        f"{statistics.median(cpus):.3f}",
                    ]
                )
    print(
        f"`rlenv validate` and `rlenv run --limit 1` (one rollout), whole process tree, median"
        f" of {runs}"
    )
    print(common.table(["command", "median s", "min s", "max s", "median CPU s"], rows))
    return python_validate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="7 runs instead of 15")
    parser.add_argument(
        "--part",
        choices=("all", "help", "commands", "worker"),
        default="all",
        help="measure only `rlenv --help`, validate/run, or the worker start",
    )
    args = parser.parse_args()
    runs = 7 if args.quick else 15
    common.header("startup: `rlenv --help`, validate and run, a worker's start; whole process")
    verdicts: list[str] = []
    if args.part in ("all", "commands"):
        validate = command_times(5 if args.quick else 9)
        print()
        verdicts.append(
            f"target: `rlenv validate` (python env) <= {VALIDATE_TARGET_S:.2f} s:"
            f" {validate:.3f} s  {common.verdict(validate <= VALIDATE_TARGET_S)}"
        )
    if args.part in ("all", "help"):
        verdicts.append(help_times(runs))
    if args.part in ("all", "worker"):
        verdicts.extend(worker_times(args.quick))
    for line in verdicts:
        print(line)


def help_times(runs: int) -> str:
    """Print `rlenv --help`'s figures and its slowest imports; return its target line."""

    help_command = [str(common.RLENV), "--help"]
    for _ in range(2):  # warm the bytecode cache and the page cache
        common.measure(help_command, pss=False).check()
    cached, cached_all = common.median_wall(help_command, runs)
    bare, _ = common.median_wall([sys.executable, "-c", "pass"], runs)
    typer_only, _ = common.median_wall([sys.executable, "-c", "import typer"], runs)
    uncached, _ = common.median_wall(
        help_command, runs, env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": None}
    )
    memory = common.measure(help_command).check()

    rows = [
        [
            "rlenv --help (bytecode cached)",
            f"{cached:.3f}",
            f"{min(cached_all):.3f}",
            f"{max(cached_all):.3f}",
            f"{memory.sum_peak_mb:.0f}",
        ],
        [
            "rlenv --help (no bytecode cache: rlenv/*.py compiled each run)",
            f"{uncached:.3f}",
            "",
            "",
            "",
        ],
        ["python -c pass (interpreter floor)", f"{bare:.3f}", "", "", ""],
        ["python -c 'import typer'", f"{typer_only:.3f}", "", "", ""],
    ]
    print(f"median of {runs} runs, wall seconds (subprocess start to exit)")
    print(common.table(["command", "median s", "min s", "max s", "peak RSS MB"], rows))
    print()
    print("`python -X importtime -c 'import rlenv.cli'`: top 10 by cumulative time")
    print(
        common.table(
            ["module", "cumulative ms", "self ms"],
            [
                [name, f"{cum / 1000:.1f}", f"{own / 1000:.1f}"]
                for cum, own, name in import_times("rlenv.cli", 10)
            ],
        )
    )
    print()
    return (
        f"target: `rlenv --help` median <= {TARGET_S:.2f} s with bytecode cached: {cached:.3f} s"
        f"  {common.verdict(cached <= TARGET_S)}"
    )


def worker_times(quick: bool) -> list[str]:
    """Print a worker's start (spawn to ready) and its slowest imports; return target lines."""
    worker_runs = 5 if quick else 11
    worker_start_seconds(1)  # warm
    cpu_times.clear()
    rss_sizes.clear()
    plain, faked = worker_start_seconds(worker_runs)
    tool_cpu, tool_rss = cpu_times[1::2], rss_sizes[1::2]  # with libfaketime, as a run starts them
    cpu_times.clear()
    rss_sizes.clear()
    _, no_tools = worker_start_seconds(worker_runs, "instant", (True,))
    plain_cpu, plain_rss = list(cpu_times), list(rss_sizes)
    print(
        f"frozen-world worker start, spawn to ready (env checks and the policy module included,"
        f" 1000 inputs), median of {worker_runs}; RSS: the worker's once ready (each rollout"
        " forks it)"
    )
    print(
        common.table(
            ["worker", "median s", "min s", "max s", "median CPU s", "RSS MB"],
            [
                [
                    label,
                    f"{statistics.median(t):.3f}",
                    f"{min(t):.3f}",
                    f"{max(t):.3f}",
                    f"{statistics.median(cpu):.3f}" if cpu else "",
                    f"{statistics.median(rss):.1f}" if rss else "",
                ]
                for label, t, cpu, rss in (
                    ("one tool, without libfaketime", plain, [], []),
                    (
                        "one tool, with libfaketime (LD_PRELOAD, sitecustomize shim)",
                        faked,
                        tool_cpu,
                        tool_rss,
                    ),
                    ("no tools, with libfaketime", no_tools, plain_cpu, plain_rss),
                )
            ],
        )
    )
    print()
    print("what a worker imports (one tool): top 10 of `-X importtime` of its start")
    print(common.table(["module", "cumulative ms", "self ms"], worker_imports(10)))
    print()
    lines = []
    for label, t, cpu in (("one tool", faked, tool_cpu), ("no tools", no_tools, plain_cpu)):
        ready = statistics.median(t)
        lines.append(
            f"target: worker ready ({label}) <= {WORKER_TARGET_S:.2f} s: {ready:.3f} s wall"
            f" ({statistics.median(cpu):.3f} s CPU)  {common.verdict(ready <= WORKER_TARGET_S)}"
        )
    return lines


if __name__ == "__main__":
    main()
