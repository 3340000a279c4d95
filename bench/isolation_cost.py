"""What running env code in a child per rollout costs (issue 26): `rlenv run --concurrency 4` of
a 200-rollout env (the instant policy of `bench/common.py`, plain and with one replayed tool
call), the same command with two source trees, paired (alternating order, same load), whole
process tree: wall time and CPU time (user + sys), per rollout.

Run: `.venv/bin/python bench/isolation_cost.py [--base /work/main] [--tree DIR ...] [--runs 3]`;
each tree is put first on PYTHONPATH (the workers inherit it; `-P`: not the cwd), so the
same venv runs both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

ROLLOUTS = 200


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="/work/main")
    parser.add_argument("--tree", action="append", help="a tree to compare (this one if none)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    trees = {"base": str(Path(args.base).resolve())}
    for number, tree in enumerate(args.tree or [str(common.ROOT)]):
        trees[f"tree{number}"] = str(Path(tree).resolve())
    with common.temp_dir("bench-isolation-") as tmp:
        for kind, tool in (("plain", False), ("one-tool", True)):
            spec = common.build_env(
                tmp / kind, ROLLOUTS, policy="one_tool" if tool else "instant", tool=tool
            )
            seen: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for run in range(args.runs + 1):  # the first pair warms caches, not counted
                order = list(trees) if run % 2 == 0 else list(trees)[::-1]  # paired
                for name in order:
                    out = tmp / f"{kind}-{name}-{run}"
                    command = [
                        sys.executable, "-P", "-m", "rlenv.cli", "run", str(spec),
                        "--out", str(out), "--json", "--concurrency", str(args.concurrency),
                    ]  # fmt: skip
                    environ: dict[str, str | None] = {"PYTHONPATH": trees[name]}
                    taken = common.measure(command, pss=False, interval=1.0, env=environ).check()
                    if run:
                        seen[name].append((taken.wall_s, taken.cpu_s))
            for name, tree in trees.items():
                wall = statistics.median(w for w, _ in seen[name])
                cpu = statistics.median(c for _, c in seen[name])
                print(
                    f"{kind:8s} {name:5s} {tree}: wall {wall:.2f} s ({1000 * wall / ROLLOUTS:.1f}"
                    f" ms/rollout), cpu {cpu:.2f} s ({1000 * cpu / ROLLOUTS:.1f} ms/rollout)"
                )
            base = statistics.median(w for w, _ in seen["base"])
            cbase = statistics.median(c for _, c in seen["base"])
            for name in list(trees)[1:]:
                wall = statistics.median(w for w, _ in seen[name])
                cpu = statistics.median(c for _, c in seen[name])
                print(
                    f"{kind:8s} {name} - base: wall {1000 * (wall - base) / ROLLOUTS:+.1f}"
                    f" ms/rollout, cpu {1000 * (cpu - cbase) / ROLLOUTS:+.1f} ms/rollout"
                )


if __name__ == "__main__":
    main()
