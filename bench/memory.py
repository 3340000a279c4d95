"""Peak memory of `rlenv run` at 1k and 100k rollouts: results are streamed, not held.

An env with 1 000 inputs, an instant python policy, no tools and one exact_match verifier, run
with `--rollouts 1` (1k rollouts) and `--rollouts 100` (100k; `--quick`: 20, 20k), so only the
number of results changes. Memory is measured three ways: the peak of the sampled sum of Pss over
the live process tree (orchestrator + workers + their templates + each rollout's child: PSS counts
a page shared by N processes as 1/N in each, so the world's pages, which every template and child
shares copy-on-write with its worker, count once); the peak of the sampled sum of every live
process's RSS (which counts those shared pages again for every process alive at the sample: it
grows with how many children happen to be alive when sampled, not with the run); and the
orchestrator's own peak RSS.
Target (issue 30): the 100k run's peaks within 1.1x of the 1k run's, for the tree's PSS and for
the orchestrator (the largest process); the summed RSS ratio is printed beside them. On a miss, a
tracemalloc snapshot of the orchestrator taken when `build_summary` starts (20k rollouts) names
the lines holding memory.
Run: `.venv/bin/python bench/memory.py [--quick] [--tree DIR]` (`--tree`: measure the rlenv
of another checkout, e.g. main's, for an A/B with the same script).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

INPUTS = 1000
TARGET_RATIO = 1.1


def run(
    spec: Path, out: Path, rollouts: int, tree: str | None = None
) -> tuple[common.Measurement, dict[str, Any]]:
    measured = common.measure(
        common.rlenv_run(spec, out, "--rollouts", str(rollouts)),
        timeout=1800,
        env={"PYTHONPATH": tree} if tree else None,
    ).check()
    summary = json.loads(measured.stdout)
    expected = INPUTS * rollouts
    lines = common.count_lines(out / "results.jsonl")
    if summary["rollouts"] != expected or lines != expected:
        raise RuntimeError(f"expected {expected} rollouts, got {summary['rollouts']} ({lines})")
    return measured, summary


def _profile_memory(spec: str, rollouts: int, top: int) -> None:
    """tracemalloc in the orchestrator: where the memory is when build_summary starts."""
    import tempfile
    import tracemalloc

    from rlenv import runner, summary

    original = summary.build_summary
    report: list[str] = []

    def traced(*args: Any, **kwargs: Any) -> Any:
        current, peak = tracemalloc.get_traced_memory()
        snapshot = tracemalloc.take_snapshot()
        report.append(
            f"at build_summary entry: {current / 2**20:.0f} MB traced ({peak / 2**20:.0f} MB"
            f" peak so far); top {top} lines by size:"
        )
        for stat in snapshot.statistics("lineno")[:top]:
            frame = stat.traceback[0]
            where = frame.filename
            for marker in ("site-packages/", "lib/python3.11/", str(common.ROOT) + "/"):
                if marker in where:
                    where = where.split(marker, 1)[1]
                    break
            report.append(
                f"  {stat.size / 2**20:8.1f} MB {stat.count:9d} blocks  {where}:{frame.lineno}"
            )
        result = original(*args, **kwargs)
        current, peak = tracemalloc.get_traced_memory()
        report.append(
            f"after build_summary: {current / 2**20:.0f} MB traced, peak {peak / 2**20:.0f} MB"
        )
        return result

    summary.build_summary = traced  # what the run's SummaryPlan.build calls
    out = Path(tempfile.mkdtemp(prefix="bench-memprof-")) / "run"
    tracemalloc.start()
    runner.run(spec, runner.RunSettings(out=out, rollouts=rollouts))
    tracemalloc.stop()
    print(f"orchestrator tracemalloc, {INPUTS * rollouts} rollouts")
    print("\n".join(report))


def orchestrator_kib(measured: common.Measurement) -> int:
    """The peak RSS of the `rlenv run` process itself."""
    return max(
        (kib for pid, kib in measured.peak_kib.items() if " run " in measured.names.get(pid, "")),
        default=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k vs 20k, no profile")
    parser.add_argument("--tree", help="measure the rlenv of this checkout (PYTHONPATH)")
    args = parser.parse_args()
    large = 20 if args.quick else 100
    common.header("memory: rlenv run peak RSS, 1k vs many rollouts")
    if args.tree:
        print(f"# measured tree: {args.tree}")
    rows = []
    measured: dict[int, common.Measurement] = {}
    with common.temp_dir("bench-memory-") as root:
        spec = common.build_env(root / "env", INPUTS)
        run(spec, root / "warm", 1, args.tree)  # fills the bytecode cache; not reported
        for rollouts in (1, large):
            result, summary = run(spec, root / f"out-{rollouts}", rollouts, args.tree)
            measured[rollouts] = result
            size = (root / f"out-{rollouts}" / "results.jsonl").stat().st_size / 1e6
            rows.append(
                [
                    f"{INPUTS * rollouts}",
                    f"{result.wall_s:.1f}",
                    f"{result.cpu_s:.1f}",
                    f"{INPUTS * rollouts / result.wall_s:.0f}",
                    f"{size:.0f}",
                    f"{result.peak_rss_sum_kib / 1024:.0f}",
                    f"{orchestrator_kib(result) / 1024:.1f}",
                    f"{result.processes}",
                    f"{result.peak_pss_mb:.0f}",
                ]
            )
            print(f"  ... {INPUTS * rollouts} rollouts: {result.wall_s:.1f}s", flush=True)
        print()
        print(
            f"{INPUTS} inputs x K rollouts, instant policy, no tools, one verifier,"
            " --concurrency 4 (default)"
        )
        print(
            common.table(
                [
                    "rollouts",
                    "wall s",
                    "CPU s",
                    "rollouts/s",
                    "results MB",
                    "peak tree RSS MB",
                    "orchestrator MB",
                    "processes",
                    "peak PSS MB",
                ],
                rows,
            )
        )
        small, big = measured[1], measured[large]
        ratio = big.peak_pss_mb / small.peak_pss_mb
        rss_ratio = big.peak_rss_sum_kib / small.peak_rss_sum_kib
        largest_ratio = orchestrator_kib(big) / orchestrator_kib(small)
        print()
        for rollouts in (1, large):
            print(f"  {INPUTS * rollouts} rollouts, the 8 largest processes:")
            print("\n".join(measured[rollouts].breakdown().splitlines()[:8]))
        print(
            f"(not a target) {INPUTS * large} rollouts' peak tree RSS, summed over processes:"
            f" {big.peak_rss_sum_kib / 1024:.0f} / {small.peak_rss_sum_kib / 1024:.0f} MB ="
            f" {rss_ratio:.2f}x (shared pages counted once per live process)"
        )
        print(
            f"target: {INPUTS * large} rollouts' peak tree PSS within {TARGET_RATIO}x of 1k's:"
            f" {big.peak_pss_mb:.0f} / {small.peak_pss_mb:.0f} MB ="
            f" {ratio:.2f}x  {common.verdict(ratio <= TARGET_RATIO)}"
        )
        print(  # the docstring's second target, dropped from the output when the first moved to PSS
            f"target: {INPUTS * large} rollouts' orchestrator (largest process) within"
            f" {TARGET_RATIO}x of 1k's: {orchestrator_kib(big) / 1024:.1f} /"
            f" {orchestrator_kib(small) / 1024:.1f} MB = {largest_ratio:.2f}x"
            f"  {common.verdict(largest_ratio <= TARGET_RATIO)}"
        )
        missed = ratio > TARGET_RATIO or largest_ratio > TARGET_RATIO
        if missed and not args.quick:
            print()
            print("profile (the target was missed)")
            profiled = subprocess.run(
                [sys.executable, __file__, "_profile", str(spec), "20", "15"],
                capture_output=True,
                text=True,
                env=common.bench_env({"PYTHONPATH": args.tree} if args.tree else None),
            )
            print(profiled.stdout)
            if profiled.returncode:
                print(profiled.stderr[-3000:])


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "_profile":
        _profile_memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
