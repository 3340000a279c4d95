"""The plain replayed-policy run of two rlenv trees, alternated so a busy machine weighs on both.

`rlenv run SPEC --model replay:ANSWERS --concurrency 4` on overhead.py's plain env (N inputs,
one exact_match verifier, no tools; each input's gold answer replayed: every rollout passes),
the "plain, replayed policy" row that issue 30 compares with Inspect's mockllm. For each run:
wall time, the orchestrator's own CPU and its children's (the frozen-world workers, reaped
through their `unshare`), the run digest (which must be the same for both trees) and the load
average. The orchestrator runs in-process here (`rlenv.cli.main`), so its own CPU is read
apart from the workers'. Run from the repository:

    git worktree add --detach /tmp/rlenv-old OLD_COMMIT
    .venv/bin/python bench/replay_ab.py /tmp/rlenv-old . [--inputs 10000] [--runs 3]

Each tree is imported through PYTHONPATH (the workers get it through the world's variables).
The first run of each tree (1,000 inputs) is a warm-up and is not reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import overhead  # noqa: E402

RUNNER = """
import atexit, json, os, resource, sys, time

started = time.perf_counter()


def report():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = {
        "wall": time.perf_counter() - started,
        "orchestrator": own.ru_utime + own.ru_stime,
        "workers": children.ru_utime + children.ru_stime,
        "load": os.getloadavg()[0],
    }
    print("FIGURES " + json.dumps(figures), file=sys.stderr)


atexit.register(report)
from rlenv.cli import main

sys.argv = ["rlenv", *sys.argv[1:]]
main()
"""


def run_once(tree: Path, spec: Path, answers: Path, out: Path) -> dict[str, float | str]:
    command = [sys.executable, "-c", RUNNER, "run", str(spec), "--out", str(out), "--json"]
    command += ["--concurrency", "4", "--model", f"replay:{answers}"]
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
    figures["digest"] = json.loads(done.stdout)["digest"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs=2, type=Path, help="OLD_TREE NEW_TREE")
    parser.add_argument("--inputs", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    common.header("replay_ab: plain rollouts, replayed policy, two trees alternated")
    names = [str(tree) for tree in args.trees]
    rows: dict[str, list[dict[str, float | str]]] = {name: [] for name in names}
    with common.temp_dir("bench-replay-ab-") as root:
        for size in (1000, args.inputs):
            common.build_env(root / f"plain-{size}", size)
            overhead.write_answers(root / f"answers-{size}.jsonl", size)
        for tree in args.trees:  # warm-up: bytecode caches
            spec, answers = root / "plain-1000" / "env.yaml", root / "answers-1000.jsonl"
            run_once(tree, spec, answers, root / f"warm-{os.getpid()}-{len(str(tree))}")
        spec, answers = (
            root / f"plain-{args.inputs}" / "env.yaml",
            root / f"answers-{args.inputs}.jsonl",
        )
        for number in range(args.runs):
            for tree, name in zip(args.trees, names, strict=True):
                figures = run_once(
                    tree,
                    spec,
                    answers,
                    root / f"out-{number}-{len(rows[name])}-{names.index(name)}",
                )
                rows[name].append(figures)
                print(
                    f"  {name}: wall {figures['wall']:.2f} s, orchestrator"
                    f" {figures['orchestrator']:.2f} s CPU, workers {figures['workers']:.2f} s CPU,"
                    f" load {figures['load']:.1f}",
                    flush=True,
                )
    print()
    table = []
    for name in names:
        runs = rows[name]
        total = [float(r["orchestrator"]) + float(r["workers"]) for r in runs]
        table.append(
            [
                name,
                f"{statistics.median(float(r['wall']) for r in runs):.2f}",
                f"{statistics.median(float(r['orchestrator']) for r in runs):.2f}",
                f"{statistics.median(float(r['workers']) for r in runs):.2f}",
                f"{statistics.median(total):.2f}",
                str(runs[0]["digest"])[:16],
            ]
        )
    print(f"{args.inputs} rollouts, --concurrency 4, median of {args.runs}")
    print(
        common.table(
            ["tree", "wall s", "orchestrator CPU s", "workers CPU s", "total CPU s", "digest"],
            table,
        )
    )
    digests = {str(r["digest"]) for runs in rows.values() for r in runs}
    print(
        f"digests {'identical' if len(digests) == 1 else 'DIFFER: ' + ', '.join(sorted(digests))}"
    )


if __name__ == "__main__":
    main()
