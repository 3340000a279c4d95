"""Start-up cost of two rlenv trees, measured alternately so that a busy machine weighs on both.

`rlenv --help`, `rlenv validate` and `rlenv run --limit 1` (whole process tree: wall, and
user + system CPU of the command and every child it waited for) and a frozen-world worker's
start as `rlenv run` makes it (`LocalExecutor` with one worker, the env's checks in it: spawn
to ready, wall; the worker's own CPU and RSS once ready: every rollout forks it, and a fork
costs in proportion to its RSS), on a python env whose module imports nothing (like most test
envs) and on the bench's one-tool env (an httpx tool replayed from a cassette). Run from the
repository:

    git worktree add /tmp/rlenv-old OLD_COMMIT
    .venv/bin/python bench/startup_ab.py /tmp/rlenv-old . [--runs 7] [--quick]

Each tree is imported through PYTHONPATH (the worker and the checking child get it through the
world's variables), with a bytecode cache of its own. The first run of each is a warm-up.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

PLAIN_MODULE = '''
def instant(messages, tools, ctx):
    """Answer at once with the last word of the prompt."""
    return str(messages[-1]["content"]).split()[-1]
'''

WORKER_PROBE = """
import os, sys, tempfile, time
from pathlib import Path
from rlenv.executors.local import LocalExecutor
from rlenv.worker.config import WorkerConfig
checks = {"purpose": "run", "model": None, "defer_expensive": False}  # as `rlenv run` starts one
config = WorkerConfig(spec_path=sys.argv[1], work_root=tempfile.mkdtemp(), model_uri=sys.argv[2],
                      world_checks=checks)
started = time.perf_counter()
executor = LocalExecutor(config, 1)
wall = time.perf_counter() - started
stack, cpu, rss = [executor.all[0].process.pid], 0, 0
while stack:  # the worker and what its start command left around it (unshare --fork)
    pid = stack.pop()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu += sum(int(value) for value in fields[11:15])
    status = Path(f"/proc/{pid}/status").read_text().split("VmRSS:")
    rss = max(rss, int(status[1].split()[0]) if len(status) > 1 else 0)
    for task in Path(f"/proc/{pid}/task").iterdir():
        stack += [int(child) for child in (task / "children").read_text().split()]
executor.close()
print(f"wall {wall:.3f} cpu {cpu / os.sysconf('SC_CLK_TCK'):.3f} rss {rss / 1024:.1f}",
      file=sys.stderr)
"""


def _environment(tree: Path, label: str) -> dict[str, str]:
    merged = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    merged["PYTHONPYCACHEPREFIX"] = str(common.PYCACHE) + f"-ab-{label}"
    merged.pop("PYTHONDONTWRITEBYTECODE", None)
    return merged


def _tree_run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="the tree measured first (e.g. a worktree)")
    parser.add_argument("new", type=Path, help="the tree measured second")
    parser.add_argument("--runs", type=int, default=7, help="measured runs of each (plus one)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="`rlenv --help` and the worker starts only (no validate or run)",
    )
    args = parser.parse_args()
    common.header(f"startup A/B: {args.old} against {args.new}, alternated")
    trees = {"old": args.old, "new": args.new}
    rows = []
    with common.temp_dir("bench-startup-ab-") as root:
        plain = common.build_env(root / "plain", 20, policy="instant")
        (plain.parent / "benchenv.py").write_text(PLAIN_MODULE)
        tool = common.build_env(root / "tool", 20, policy="one_tool", tool=True)
        probe = root / "probe.py"
        probe.write_text(WORKER_PROBE)
        out = root / "out"
        cases = [
            ("rlenv --help", plain, ["--help"]),
            ("rlenv validate: python env", plain, ["validate", str(plain)]),
            ("rlenv run --limit 1: python env", plain, ["run", str(plain), "--limit", "1"]),
            ("rlenv validate: one-tool env", tool, ["validate", str(tool)]),
            ("rlenv run --limit 1: one-tool env", tool, ["run", str(tool), "--limit", "1"]),
        ]
        for label, spec, arguments in cases[:1] if args.quick else cases:
            command = [str(common.RLENV), *arguments]
            if arguments[0] == "run":
                command += ["--out", str(out)]
            found: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in trees}
            for number in range(args.runs + 1):
                for name, tree in trees.items():
                    shutil.rmtree(out, ignore_errors=True)
                    wall, cpu = _tree_run(command, spec.parent, _environment(tree, name))
                    if number:
                        found[name][0].append(wall)
                        found[name][1].append(cpu)
            rows.extend(_rows(label, found))
        workers = (
            ("worker start: python env", plain, "python:benchenv:instant"),
            ("worker start: one tool", tool, "python:benchenv:one_tool"),
        )
        for label, spec, model in workers:
            seen: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in trees}
            sizes: dict[str, list[float]] = {k: [] for k in trees}
            for number in range(args.runs + 1):
                for name, tree in trees.items():
                    env = _environment(tree, name)
                    result = subprocess.run(
                        [sys.executable, str(probe), str(spec), model],
                        cwd=spec.parent,
                        env=env,
                        capture_output=True,
                        text=True,
                    )
                    match = re.search(r"wall ([0-9.]+) cpu ([0-9.]+) rss ([0-9.]+)", result.stderr)
                    if match is None:
                        raise RuntimeError(f"worker probe failed:\n{result.stderr[-3000:]}")
                    if number:
                        seen[name][0].append(float(match.group(1)))
                        seen[name][1].append(float(match.group(2)))
                        sizes[name].append(float(match.group(3)))
            rows.extend(_rows(label + " (spawn to ready; the worker's CPU)", seen, sizes))
    print(f"median of {args.runs} alternated runs each")
    print(
        common.table(
            [
                "what",
                "tree",
                "median wall s",
                "min wall s",
                "median CPU s",
                "min CPU s",
                "worker RSS MB",
            ],
            rows,
        )
    )


def _rows(
    label: str,
    found: dict[str, tuple[list[float], list[float]]],
    sizes: dict[str, list[float]] | None = None,
) -> list[list[str]]:
    rows = []
    for name, (walls, cpus) in found.items():
        rows.append(
            [
                label,
                name,
                f"{statistics.median(walls):.3f}",
                f"{min(walls):.3f}",
                f"{statistics.median(cpus):.3f}",
                f"{min(cpus):.3f}",
                f"{statistics.median(sizes[name]):.1f}" if sizes else "",
            ]
        )
    return rows


if __name__ == "__main__":
    main()
