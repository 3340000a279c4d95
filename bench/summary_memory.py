"""The orchestrator's summary memory alone, 1k vs 100k rollouts: what `rlenv run` keeps of each
record it writes, without the workers (so a loaded machine measures it in seconds).

A child process per (tree, K) imports the tree's rlenv (and numpy, so both trees start alike),
then feeds 1000 inputs x K sealed records, one line at a time, to the summary's totals as
`rlenv run` does (`_Totals.add_line`, records made one at a time, none held), builds
summary.json from them (`build_summary`) and prints its peak RSS (VmHWM), the RSS before the
first record, and the CPU seconds. The records are the bench env's (instant policy, one
exact_match verifier, no reward model, answers repeating per input).
Run: `.venv/bin/python bench/summary_memory.py [--tree DIR ...] [--rollouts 1 100]`
(each --tree is measured with the same script; default: this checkout).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

INPUTS = 1000

CHILD = r"""
import json, os, resource, sys, time
import numpy  # both trees summarise with numpy: imported first, so the figures compare
from types import SimpleNamespace
from rlenv.results import encode_line, seal
from rlenv.summary import _Totals, build_summary

def vm(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
inputs, k = int(sys.argv[1]), int(sys.argv[2])
meta = {"env": {"name": "bench"}, "model": {"uri": "python:benchenv:instant"},
        "decoding": {"temperature": 0.0}, "rollouts_per_input": k, "limit": None,
        "inputs": inputs, "world": {}}
totals = _Totals.for_run(meta) if hasattr(_Totals, "for_run") else _Totals()
before = vm("VmRSS:")
started = time.process_time()
for index in range(inputs):
    for rollout in range(k):
        key = f"k{index}"
        record = seal({
            "input_id": f"q{index}", "input_index": index, "rollout": rollout,
            "seed": index * 1000 + rollout, "model": "python:benchenv:instant",
            "status": "ok", "error": None,
            "messages": [{"role": "user", "content": f"look up {key}"},
                         {"role": "assistant", "content": key}],
            "tool_calls": [], "answer": key,
            "verifiers": [{"name": "exact", "type": "exact_match", "passed": False,
                           "score": 0.0, "detail": f"expected v{index}"}],
            "passed": False, "reward": None,
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            "world": {"fs_diff": None},
            "timing": {"wall_s": 0.001},
        })
        totals.add_line(encode_line(record))
prepared = SimpleNamespace(inputs=[SimpleNamespace(id=f"q{i}", data={}) for i in range(inputs)])
summary = build_summary(prepared, meta, [], "python:benchenv:instant", written=totals)
cpu = time.process_time() - started
print(json.dumps({"before_mb": before, "peak_mb": vm("VmHWM:"), "cpu_s": cpu,
                  "digest": summary["digest"]}))
"""


def measure(tree: str, rollouts: int) -> dict[str, float]:
    env = common.bench_env({"PYTHONPATH": tree})
    done = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, str(INPUTS), str(rollouts)],  # -P: not the cwd's rlenv
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", help="a checkout to measure (repeatable)")
    parser.add_argument("--rollouts", type=int, nargs="+", default=[1, 100])
    args = parser.parse_args()
    trees = args.tree or [str(common.ROOT)]
    common.header("summary memory: what `rlenv run` keeps per record, 1k vs 100k")
    rows = []
    peaks: dict[tuple[str, int], float] = {}
    digests: dict[int, set[str]] = {}
    for rollouts in args.rollouts:  # interleaved: every tree at one K, then the next K
        for tree in trees:
            found = measure(tree, rollouts)
            peaks[(tree, rollouts)] = found["peak_mb"]
            digests.setdefault(rollouts, set()).add(str(found["digest"]))
            rows.append(
                [
                    tree,
                    f"{INPUTS * rollouts}",
                    f"{found['before_mb']:.1f}",
                    f"{found['peak_mb']:.1f}",
                    f"{found['peak_mb'] - found['before_mb']:.1f}",
                    f"{found['cpu_s']:.1f}",
                ]
            )
            print(f"  ... {tree} {INPUTS * rollouts}: {found['peak_mb']:.1f} MB", flush=True)
    print()
    print(
        common.table(
            ["tree", "rollouts", "RSS before MB", "peak RSS MB", "growth MB", "CPU s"], rows
        )
    )
    small, large = min(args.rollouts), max(args.rollouts)
    for tree in trees:
        ratio = peaks[(tree, large)] / peaks[(tree, small)]
        print(f"{tree}: {INPUTS * large} / {INPUTS * small} rollouts peak = {ratio:.2f}x")
    same = all(len(found) == 1 for found in digests.values())
    print(f"same run digest in every tree: {same}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
