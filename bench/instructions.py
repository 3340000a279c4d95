"""The orchestrator's instructions per outside rollout, counted by callgrind: an A/B that the
machine's load does not move.

On a shared 2-core machine the orchestrator's CPU seconds per rollout (bench/concurrency.py)
swing by a third between two runs of the same tree, more than most changes to it. Instructions
executed do not: this runs `rlenv run --model openai:bench --concurrency C` against the loopback
chat server (tests/chat_server.py, `--latency-ms`) with the orchestrator under
`valgrind --tool=callgrind` (its frozen-world workers and the server run natively), for two run
sizes, and prints (instructions of the larger run - of the smaller) / (rollouts between them):
the instructions one more rollout costs the orchestrator, start-up and imports cancelled out
(what grows with the inputs, such as reading them and the summary, stays in). Under callgrind the
orchestrator runs ~50x slower, so its loop is busier than at full speed (larger finish batches):
a figure to compare trees with, not a CPU time.

Needs valgrind (`apt-get install valgrind`). Run: `.venv/bin/python bench/instructions.py
[--ab TREE,TREE] [--small 300] [--large 1300] [--concurrency 256] [--latency-ms 100]`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def slow_env(root: Path, size: int) -> Path:
    """bench/common.py's env with a rollout limit that a run ~50x slower than usual (under
    callgrind, on a busy machine) does not reach: a timed-out rollout is another path."""
    import yaml

    spec = common.build_env(root, size)
    data = yaml.safe_load(spec.read_text())
    data["limits"]["timeout_s"] = 3600
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def instructions(tree: str, spec: Path, out: Path, base_url: str, concurrency: int) -> int:
    """Instructions the orchestrator of one `rlenv run` executed (callgrind's total)."""
    command = common.rlenv_run(
        spec,
        out,
        "--model",
        "openai:bench",
        "--base-url",
        base_url,
        "--concurrency",
        str(concurrency),
    )
    counted = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}.callgrind",
            "--trace-children=no",
            sys.executable,
            *command,
        ],
        capture_output=True,
        text=True,
        env=common.bench_env({"PYTHONPATH": tree}),
    )
    found = re.search(r"Collected : (\d+)", counted.stderr)
    if counted.returncode != 0 or found is None:
        raise RuntimeError(f"{tree}: {counted.stderr[-2000:]}")
    summary = json.loads(counted.stdout)
    if summary["counts"].get("ok") != summary["rollouts"]:
        raise RuntimeError(f"{tree}: unexpected run {summary['counts']}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ab", help="TREE,TREE,...: each tree in turn (default: this one)")
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--large", type=int, default=1300)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    args = parser.parse_args()
    common.header("instructions: the orchestrator's instructions per outside rollout (callgrind)")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return
    trees = args.ab.split(",") if args.ab else [str(common.ROOT)]
    rows = []
    with (
        common.temp_dir("bench-instructions-") as root,
        common.chat_server(args.latency_ms) as server,
    ):
        specs = {size: slow_env(root / f"env-{size}", size) for size in (args.small, args.large)}
        for number, tree in enumerate(trees):
            counts = {
                size: instructions(
                    tree,
                    spec,
                    root / f"out-{number}-{size}",
                    f"{server.base_url}/v1",
                    args.concurrency,
                )
                for size, spec in specs.items()
            }
            per = (counts[args.large] - counts[args.small]) / (args.large - args.small)
            print(f"  {tree}: {per:,.0f} instructions per rollout", flush=True)
            rows.append([tree, f"{counts[args.small]:,}", f"{counts[args.large]:,}", f"{per:,.0f}"])
    print()
    print(
        f"rlenv run --model openai:bench --concurrency {args.concurrency}, server latency"
        f" {args.latency_ms:g} ms; orchestrator only (workers and server not counted)"
    )
    print(
        common.table(
            [
                "tree",
                f"instructions, {args.small} rollouts",
                f"{args.large} rollouts",
                "per rollout",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
