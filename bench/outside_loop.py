"""The orchestrator's own share of an outside rollout: its batch loop without HTTP and without
the results line.

bench/concurrency.py measures the orchestrator's CPU per rollout of a whole `rlenv run
--model openai:...`: the HTTP client, the rollout loop with its `finish` in a worker, and the
writing and tallying of each results line, together. This script takes the first and the last
out, to see what is left: the real runner loop (`rlenv.runner._execute`) over a real local
executor (2 frozen-world workers grading each rollout's `finish`, batched), with a model that
answers after `--latency-ms` without any I/O (an `asyncio.sleep`, the same for every tree)
and a writer that keeps nothing. Printed: the orchestrator's CPU per rollout (its whole
process, from the first rollout to the last), its workers' (their process trees), the rate,
and the `finish` latency (median, 90th percentile). With `--ab TREE,TREE`, each tree in turn
(imported through PYTHONPATH, workers included), `--rounds` times, and the medians.

Run: `.venv/bin/python bench/outside_loop.py [--rollouts 8000] [--concurrency 256]
[--latency-ms 100] [--ab TREE,TREE --rounds 3]`.
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

CHILD = """
import asyncio, json, os, sys, time
from pathlib import Path
from rlenv import runner
from rlenv.env import load_environment
from rlenv.executors import make_executor
from rlenv.providers.base import ModelReply
from rlenv.worker.config import PendingTasks

spec, work = sys.argv[1], Path(sys.argv[2])
concurrency, latency = int(sys.argv[3]), float(sys.argv[4])


class Model:  # an outside policy without I/O: the same answer and usage an HTTP one parses
    uri = "openai:bench"
    in_world = False

    def identity(self):
        return {"uri": self.uri}

    async def complete(self, request):
        await asyncio.sleep(latency)
        message = {"role": "assistant", "content": "echo: " + request.messages[-1]["content"]}
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        sent = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": request.seed}
        return ModelReply(message, usage, None, {"finish_reason": "stop", "sent": sent})

    async def aclose(self):
        pass


class Discard:  # the results line is helper "lines"' cost, measured elsewhere
    written = 0

    def write(self, record):
        self.written += 1


def tree_cpu(pids):
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def descendants(pid):
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        found.append(here)
        try:
            with open(f"/proc/{here}/task/{here}/children") as handle:
                todo += [int(child) for child in handle.read().split()]
        except OSError:
            pass
    return found


prepared = load_environment(spec, purpose="run", model="openai:bench", world_checks="workers")
model, writer = Model(), Discard()
meta = {"expensive_fraction": 1.0, "deferred_expensive": False}
config = runner._worker_config(prepared, model, work, None, meta, False)
config.world_checks = {"purpose": "run", "model": "openai:bench", "defer_expensive": False}
executor = make_executor("local", config, 2, None, exact=True)
latencies = []
finish = executor.finish


async def timed_finish(*args):
    started = time.monotonic()
    try:
        return await finish(*args)
    finally:
        latencies.append(time.monotonic() - started)


executor.finish = timed_finish
workers = [pid for slot in executor.all for pid in descendants(slot.process.pid)]
tasks = PendingTasks(prepared.inputs, 1, set())
workers_before, cpu_before, wall_before = tree_cpu(workers), time.process_time(), time.monotonic()
try:
    import uvloop

    factory = uvloop.new_event_loop
except ImportError:
    factory = None
with asyncio.Runner(loop_factory=factory) as loop:
    loop.run(runner._execute(prepared, model, executor, tasks, concurrency, writer, lambda n: None))
cpu, wall = time.process_time() - cpu_before, time.monotonic() - wall_before
workers_cpu = tree_cpu(workers + [p for s in executor.all for p in descendants(s.process.pid)])
executor.close()
latencies.sort()
print(json.dumps({
    "rollouts": writer.written,
    "orch_ms": cpu / writer.written * 1000,
    "workers_ms": (workers_cpu - workers_before) / writer.written * 1000,
    "rate": writer.written / wall,
    "finish_p50_ms": latencies[len(latencies) // 2] * 1000,
    "finish_p90_ms": latencies[len(latencies) * 9 // 10] * 1000,
}))
"""


def measure(tree: str, spec: Path, work: Path, concurrency: int, latency_ms: float) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    env = common.bench_env({"PYTHONPATH": tree})
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(spec),
            str(work),
            str(concurrency),
            str(latency_ms / 1000),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=8000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--ab", help="TREE,TREE,...: each tree in turn (default: this one)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    trees = args.ab.split(",") if args.ab else [str(common.ROOT)]
    common.header("outside_loop: the orchestrator's batch loop without HTTP or results lines")
    seen: dict[str, list[dict]] = {tree: [] for tree in trees}
    with common.temp_dir("bench-outside-loop-") as root:
        spec = common.build_env(root / "env", args.rollouts)
        for round_ in range(args.rounds):
            for number, tree in enumerate(trees):
                load = os.getloadavg()[0]
                row = measure(
                    tree, spec, root / f"work-{round_}-{number}", args.concurrency, args.latency_ms
                )
                seen[tree].append(row)
                print(
                    f"  {tree}: orch {row['orch_ms']:.3f} workers {row['workers_ms']:.3f}"
                    " ms/rollout,"
                    f" {row['rate']:.0f} rollouts/s, finish p50 {row['finish_p50_ms']:.1f} ms"
                    f" p90 {row['finish_p90_ms']:.1f} ms, load {load:.1f}",
                    flush=True,
                )
    rows = [
        [
            tree,
            f"{args.concurrency}",
            f"{statistics.median(r['orch_ms'] for r in runs):.3f}",
            f"{statistics.median(r['workers_ms'] for r in runs):.3f}",
            f"{statistics.median(r['rate'] for r in runs):.0f}",
            f"{statistics.median(r['finish_p50_ms'] for r in runs):.1f}",
        ]
        for tree, runs in seen.items()
    ]
    print()
    print(
        f"{args.rollouts} rollouts, a model answering after {args.latency_ms:g} ms (no I/O),"
        f" limit {args.concurrency / (args.latency_ms / 1000):.0f} rollouts/s; medians of"
        f" {args.rounds} round(s)"
    )
    print(
        common.table(
            ["tree", "C", "orch ms/rollout", "workers ms/rollout", "rollouts/s", "finish p50 ms"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
