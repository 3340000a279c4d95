"""The per-rollout child's cost of two rlenv trees, alternated so a busy machine weighs on both.

`rlenv run SPEC --concurrency 4` on overhead.py's plain env (an instant python policy: env code,
so each rollout's conversation runs in a child forked from its worker's template) and its
one-tool env (the same policy making one replayed tool call). For each run: wall time, the
orchestrator's own CPU, the CPU and minor (copy-on-write) page faults of everything below it
(workers, templates, the rollouts' children: `getrusage(RUSAGE_CHILDREN)`, which each parent
adds its reaped children to), per rollout, the run digest (the same for both trees) and the
load average. The orchestrator runs in-process (`rlenv.cli.main`), so its own figures are read
apart from the tree's. Run from the repository:

    git worktree add --detach /tmp/rlenv-old OLD_COMMIT
    .venv/bin/python bench/fork_ab.py /tmp/rlenv-old . [--inputs 1000] [--runs 3]

Each tree is imported through PYTHONPATH (the workers get it through the world's variables).
A first run of each tree per env (100 inputs) warms the bytecode caches and is not reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

RUNNER = """
import atexit, json, os, resource, sys, time

started = time.perf_counter()


def report():
    own = resource.getrusage(resource.RUSAGE_SELF)
    below = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = {
        "wall": time.perf_counter() - started,
        "orchestrator": own.ru_utime + own.ru_stime,
        "tree": below.ru_utime + below.ru_stime,
        "faults": below.ru_minflt,
        "load": os.getloadavg()[0],
    }
    print("FIGURES " + json.dumps(figures), file=sys.stderr)


atexit.register(report)
from rlenv.cli import main

sys.argv = ["rlenv", *sys.argv[1:]]
main()
"""

KINDS = {"plain": False, "one-tool": True}


def run_once(tree: Path, spec: Path, out: Path) -> dict[str, float | str]:
    command = [sys.executable, "-P", "-c", RUNNER, "run", str(spec), "--out", str(out)]
    command += ["--json", "--concurrency", "4"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=spec.parent,
        env=common.bench_env({"PYTHONPATH": str(tree.resolve())}),
        timeout=1800,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("FIGURES ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{tree}: rlenv run failed: {done.stderr[-2000:]}")
    figures: dict[str, float | str] = json.loads(lines[-1][len("FIGURES ") :])
    summary = json.loads(done.stdout)
    figures["digest"] = summary["digest"]
    figures["ok"] = summary["counts"].get("ok", 0)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs=2, type=Path, help="OLD_TREE NEW_TREE")
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kind", choices=sorted(KINDS), action="append", help="default: both")
    args = parser.parse_args()
    common.header("fork_ab: python-policy rollouts (a child each), two trees alternated")
    names = [f"{number}:{tree}" for number, tree in enumerate(args.trees)]
    kinds = args.kind or list(KINDS)
    with common.temp_dir("bench-fork-ab-") as root:
        for kind in kinds:
            tool = KINDS[kind]
            policy = "one_tool" if tool else "instant"
            warm = common.build_env(root / f"warm-{kind}", 100, policy=policy, tool=tool)
            spec = common.build_env(root / kind, args.inputs, policy=policy, tool=tool)
            for number, tree in enumerate(args.trees):
                run_once(tree, warm, root / f"warm-{kind}-{number}")
            rows: dict[str, list[dict[str, float | str]]] = {name: [] for name in names}
            for run in range(args.runs):
                order = list(zip(args.trees, names, strict=True))
                for side, (tree, name) in enumerate(order if run % 2 == 0 else order[::-1]):
                    figures = run_once(tree, spec, root / f"out-{kind}-{run}-{side}")
                    rows[name].append(figures)
                    print(
                        f"  {kind} {name}: wall {figures['wall']:.2f} s, orchestrator"
                        f" {figures['orchestrator']:.2f} s CPU, tree {figures['tree']:.2f} s CPU,"
                        f" {figures['faults']} faults, load {figures['load']:.1f}",
                        flush=True,
                    )
            table = []
            for name in names:
                runs = rows[name]
                per = 1000.0 / args.inputs
                table.append(
                    [
                        name,
                        f"{statistics.median(float(r['wall']) for r in runs):.2f}",
                        f"{per * statistics.median(float(r['orchestrator']) for r in runs):.2f}",
                        f"{per * statistics.median(float(r['tree']) for r in runs):.2f}",
                        f"{statistics.median(float(r['faults']) for r in runs) / args.inputs:.0f}",
                        f"{statistics.median(int(r['ok']) for r in runs)}",
                        str(runs[0]["digest"])[:16],
                    ]
                )
            print()
            print(f"{kind}: {args.inputs} rollouts, --concurrency 4, median of {args.runs}")
            headers = ["tree", "wall s", "orch. CPU ms/r", "tree CPU ms/r", "faults/r", "ok"]
            print(common.table([*headers, "digest"], table))
            digests = {str(r["digest"]) for runs in rows.values() for r in runs}
            same = "identical" if len(digests) == 1 else "DIFFER: " + ", ".join(sorted(digests))
            print(f"digests {same}")
            print()


if __name__ == "__main__":
    main()
